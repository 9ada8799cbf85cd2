// An ACP client written with the official TypeScript SDK (@agentclientprotocol/sdk 2.4.0).
//
// Usage (tests/test_interop.py runs it with ACP_INTEROP_NPM_DIR set):
//   node ts_client.mjs <cwd> <agent command> [agent args...]
//   node ts_client.mjs <cwd> ws://HOST:PORT/acp      (the npm directory must hold `ws` too)
//   node ts_client.mjs <cwd> http://HOST:PORT/acp    (Streamable HTTP)
// It spawns the agent, then: initialize (with fs capabilities), session/new in <cwd>, a prompt
// turn that it answers (permission "allow", fs reads and writes inside <cwd>), the extension
// request _interop/echo and the unknown _interop/missing, and a "wait" turn that it cancels with
// session/cancel when the agent asks permission in it (answering that request "cancelled", as
// docs/protocol/v1/prompt-turn.mdx asks).  It prints a JSON summary on stdout, or exits non-zero.
import { spawn } from "node:child_process";
import { readFile, writeFile } from "node:fs/promises";
import { resolve, sep } from "node:path";
import { Readable, Writable } from "node:stream";
import { loadEsm } from "./load_esm.mjs";
import { loadSdk } from "./load_sdk.mjs";

const acp = await loadSdk();
const [cwd, command, ...args] = process.argv.slice(2);

const summary = { updates: [], permissions: [], reads: [], writes: [] };

function inside(path) {
  const full = resolve(path);
  if (!full.startsWith(cwd + sep)) {
    throw acp.RequestError.invalidParams({ path }, "path outside the session directory");
  }
  return full;
}

const app = acp
  .client({ name: "ts-sdk-interop-client" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    summary.updates.push(params);
  })
  .onRequest(acp.methods.client.session.requestPermission, async ({ params, agent }) => {
    summary.permissions.push({ toolCallId: params.toolCall.toolCallId, updatesBefore: summary.updates.length });
    if (params.toolCall.toolCallId === "interop-wait") {
      await agent.notify(acp.methods.agent.session.cancel, { sessionId: params.sessionId });
      return { outcome: { outcome: "cancelled" } };
    }
    return { outcome: { outcome: "selected", optionId: "allow" } };
  })
  .onRequest(acp.methods.client.fs.readTextFile, async ({ params }) => {
    summary.reads.push(params.path);
    return { content: await readFile(inside(params.path), "utf8") };
  })
  .onRequest(acp.methods.client.fs.writeTextFile, async ({ params }) => {
    summary.writes.push({ path: params.path, content: params.content });
    await writeFile(inside(params.path), params.content, "utf8");
    return {};
  });

// A ws:// URL instead of a command: the agent is served remotely (tests/test_interop_websocket.py),
// reached with the SDK's createWebSocketStream over the `ws` package's WebSocket; an http:// URL:
// over Streamable HTTP with its createHttpStream (tests/test_transport_http_server.py).
const remote = /^(wss?|https?):\/\//.test(command);
let child = null;
let exited = Promise.resolve(null);
let stream;
if (/^https?:\/\//.test(command)) {
  const { createHttpStream } = await loadEsm("@agentclientprotocol/sdk/experimental/http-client");
  stream = createHttpStream(command, {});
} else if (remote) {
  const { createWebSocketStream } = await loadEsm("@agentclientprotocol/sdk/experimental/ws-client");
  const { WebSocket } = await loadEsm("ws");
  stream = createWebSocketStream(command, { WebSocket });
} else {
  child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
  exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
  stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
}

async function errorOf(promise) {
  try {
    return { result: await promise };
  } catch (error) {
    return { error: { code: error.code, message: error.message, data: error.data ?? null } };
  }
}

await app.connectWith(stream, async (agent) => {
  summary.initialize = await agent.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: true } },
    clientInfo: { name: "ts-sdk-interop-client", version: "2.4.0" },
  });
  const session = await agent.request(acp.methods.agent.session.new, { cwd, mcpServers: [] });
  summary.sessionId = session.sessionId;
  const prompt = (text) =>
    agent.request(acp.methods.agent.session.prompt, {
      sessionId: session.sessionId,
      prompt: [{ type: "text", text }],
    });
  summary.prompt = await prompt("hello");
  summary.updatesAfterPrompt = summary.updates.length;
  summary.echo = await errorOf(agent.request("_interop/echo", { value: 42, nested: { ok: true } }));
  summary.missing = await errorOf(agent.request("_interop/missing", {}));
  summary.cancelledPrompt = await prompt("wait");
});

child?.stdin.end();
summary.agentExit = await exited; // null for a remote agent
process.stdout.write(JSON.stringify(summary) + "\n");
