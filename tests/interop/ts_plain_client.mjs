// A plain ACP client written with the official TypeScript SDK (@agentclientprotocol/sdk 2.4.0), in
// the shape the SDK's README teaches: an `acp.client(...)` app with handlers for session/update,
// session/request_permission and fs/*, connected to a spawned agent's stdio with ndJsonStream.
//
// Usage: node ts_plain_client.mjs <cwd> <agent command> [agent args...]   (ACP_INTEROP_NPM_DIR set)
//
// The conformance checker's client mode checks it (tests/test_check_client.py; the closing note's
// table): unlike ts_client.mjs, which plays the interop tests' script, it behaves as an editor
// would.  It offers fs inside <cwd> only (paths resolved with realpath, so a symlink cannot lead
// out), answers a permission request with the first "allow" option offered (else "cancelled"),
// sends one prompt, then closes the agent's stdin and, if the agent is still there after 2 s,
// sends SIGTERM, then SIGKILL after 2 s more (transports.mdx § stdio).
import { spawn } from "node:child_process";
import { readFile, realpath, writeFile } from "node:fs/promises";
import { dirname, isAbsolute, join, sep } from "node:path";
import { Readable, Writable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { loadSdk } from "./load_sdk.mjs";

const acp = await loadSdk();
const [cwdArg, command, ...args] = process.argv.slice(2);
const root = await realpath(cwdArg);

async function inside(path, { create = false } = {}) {
  if (!isAbsolute(path)) {
    throw acp.RequestError.invalidParams({ path }, "the path must be absolute");
  }
  // an existing file (a symlink too): where it really is; a new one: where its directory really is
  let real;
  try {
    real = await realpath(path);
  } catch (error) {
    if (error.code !== "ENOENT" || !create) throw error;
    real = join(await realpath(dirname(path)), path.split(sep).pop());
  }
  if (real !== root && !real.startsWith(root + sep)) {
    throw acp.RequestError.invalidParams({ path }, "the path is outside the session directory");
  }
  return real;
}

async function fileOp(fn) {
  try {
    return await fn();
  } catch (error) {
    if (error instanceof acp.RequestError) throw error;
    if (error.code === "ENOENT") throw acp.RequestError.resourceNotFound(error.path);
    throw error;
  }
}

const app = acp
  .client({ name: "ts-sdk-plain-client" })
  .onNotification(acp.methods.client.session.update, () => {})
  .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
    const allow = params.options.find((option) => option.kind.startsWith("allow"));
    return allow ? { outcome: { outcome: "selected", optionId: allow.optionId } } : { outcome: { outcome: "cancelled" } };
  })
  .onRequest(acp.methods.client.fs.readTextFile, ({ params }) =>
    fileOp(async () => ({ content: await readFile(await inside(params.path), "utf8") })),
  )
  .onRequest(acp.methods.client.fs.writeTextFile, ({ params }) =>
    fileOp(async () => {
      await writeFile(await inside(params.path, { create: true }), params.content, "utf8");
      return {};
    }),
  );

const child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));

await app.connectWith(stream, async (agent) => {
  await agent.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: true } },
    clientInfo: { name: "ts-sdk-plain-client", version: "2.4.0" },
  });
  const session = await agent.request(acp.methods.agent.session.new, { cwd: root, mcpServers: [] });
  const answer = await agent.request(acp.methods.agent.session.prompt, {
    sessionId: session.sessionId,
    prompt: [{ type: "text", text: "Hello" }],
  });
  process.stdout.write(`stop reason: ${answer.stopReason}\n`);
});

child.stdin.end();
const gone = (ms) => Promise.race([exited.then(() => true), sleep(ms).then(() => false)]);
if (!(await gone(2000))) {
  child.kill("SIGTERM");
  if (!(await gone(2000))) {
    child.kill("SIGKILL");
  }
}
await exited;
