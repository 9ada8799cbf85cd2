// A version-2 client written with the official TypeScript SDK's v2 entry point
// (@agentclientprotocol/sdk/experimental/v2, SDK 2.4.0) that drives one full turn and a cancelled
// one: tests/test_interop_adapt.py runs it against version-1-only agents behind
// `python -m acp_trio.adapt --speak 2`.
//
// Usage: node ts_v2_turn_client.mjs <cwd> <agent command> [agent args...] (ACP_INTEROP_NPM_DIR set).
// It spawns the agent, then: initialize (protocol version 2), session/new in <cwd> through the
// SDK's ActiveSession (buildSession(cwd).start()), a "hello" prompt whose receipt it records and
// whose updates it reads with nextUpdate() until the idle "stop" message (answering its permission
// request with its first allow_once option, else allow_always), and a "wait" prompt that it cancels with session/cancel when the agent asks
// permission for tool call turn-wait (answering that request "cancelled",
// docs/protocol/v2/prompt-lifecycle.mdx "Cancellation"), read until its idle "stop" message too.
// Every session/update is also recorded raw, in arrival order.  It prints a JSON summary on
// stdout, or exits non-zero.
//
// For agents that play no such script (the real agents of tests/test_conformance_real.py),
// ACP_TURN_PROMPTS (a JSON array of the two prompts' texts) replaces "hello" and "wait", and
// ACP_TURN_CANCEL=chunk sends session/cancel at the second turn's first agent_message_chunk
// instead of at a permission request (permission requests are then all answered "allow").
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

async function loadSdkV2() {
  // As tests/interop/load_sdk.mjs, for the package's "./experimental/v2" export.
  const dir = process.env.ACP_INTEROP_NPM_DIR;
  if (!dir) {
    throw new Error("ACP_INTEROP_NPM_DIR is not set (the npm directory holding @agentclientprotocol/sdk)");
  }
  const require = createRequire(join(dir, "package.json"));
  return import(pathToFileURL(require.resolve("@agentclientprotocol/sdk/experimental/v2")).href);
}

const acp = await loadSdkV2();
const [cwd, command, ...args] = process.argv.slice(2);

const summary = { updates: [], permissions: [] };
const [firstPrompt, secondPrompt] = JSON.parse(process.env.ACP_TURN_PROMPTS || '["hello", "wait"]');
const cancelOnChunk = process.env.ACP_TURN_CANCEL === "chunk";
let inSecondTurn = false;
let cancelSent = false;

const app = acp
  .client({ name: "ts-sdk-v2-turn-client" })
  .onNotification(acp.methods.client.session.update, async ({ params, agent }) => {
    summary.updates.push(params);
    if (cancelOnChunk && inSecondTurn && !cancelSent && params.update.sessionUpdate === "agent_message_chunk") {
      cancelSent = true;
      await agent.notify(acp.methods.agent.session.cancel, { sessionId: params.sessionId });
    }
  })
  .onRequest(acp.methods.client.session.requestPermission, async ({ params, agent }) => {
    const toolCallId = params.subject?.type === "tool_call" ? params.subject.toolCall.toolCallId : null;
    summary.permissions.push({
      toolCallId,
      title: params.title,
      optionIds: params.options.map((option) => option.optionId),
      updatesBefore: summary.updates.length,
    });
    if (toolCallId === "turn-wait" && !cancelOnChunk) {
      await agent.notify(acp.methods.agent.session.cancel, { sessionId: params.sessionId });
      return { outcome: { outcome: "cancelled" } };
    }
    // "allow once" first: gemini-cli refuses "allow always" in a folder it does not trust
    const allow =
      params.options.find((option) => option.kind === "allow_once") ??
      params.options.find((option) => option.kind === "allow_always");
    return { outcome: { outcome: "selected", optionId: allow?.optionId ?? "allow" } };
  });

const child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));

// The ActiveSession's view of one turn: its messages until (and with) the idle "stop" message.
async function readTurn(session) {
  const messages = [];
  for (;;) {
    const message = await session.nextUpdate();
    messages.push(
      message.kind === "stop"
        ? { kind: "stop", stopReason: message.stopReason ?? null }
        : { kind: message.kind, sessionUpdate: message.update.sessionUpdate },
    );
    if (message.kind === "stop") {
      return messages;
    }
  }
}

await app.connectWith(stream, async (agent) => {
  summary.initialize = await agent.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    info: { name: "ts-sdk-v2-turn-client", version: "2.4.0" },
    capabilities: {},
  });
  await agent.buildSession(cwd).withSession(async (session) => {
    summary.sessionId = session.sessionId;
    summary.prompt = await session.prompt(firstPrompt);
    summary.turn = await readTurn(session);
    inSecondTurn = true;
    summary.cancelledPrompt = await session.prompt(secondPrompt);
    summary.cancelledTurn = await readTurn(session);
  });
});

child.stdin.end();
summary.agentExit = await exited;
process.stdout.write(JSON.stringify(summary) + "\n");
