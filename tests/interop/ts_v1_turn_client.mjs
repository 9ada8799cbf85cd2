// A version-1 client written with the official TypeScript SDK (@agentclientprotocol/sdk 2.4.0)
// that drives one full turn and a cancelled one: tests/test_interop_adapt.py runs it against a
// version-2-only agent behind `python -m acp_trio.adapt --speak 1`.
//
// Usage: node ts_v1_turn_client.mjs <cwd> <agent command> [agent args...] (ACP_INTEROP_NPM_DIR set).
// It spawns the agent, then: initialize (protocol version 1, no fs or terminal), session/new in
// <cwd>, a "hello" prompt whose permission request it answers "allow", and a "wait" prompt that it
// cancels with session/cancel when the agent asks permission for tool call turn-wait (answering
// that request "cancelled", docs/protocol/v1/prompt-turn.mdx "Cancellation").  Every
// session/update is recorded raw, in arrival order, with the permission requests and how many
// updates came before each.  It prints a JSON summary on stdout, or exits non-zero.
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { loadSdk } from "./load_sdk.mjs";

const acp = await loadSdk();
const [cwd, command, ...args] = process.argv.slice(2);

const summary = { updates: [], permissions: [] };

const app = acp
  .client({ name: "ts-sdk-v1-turn-client" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    summary.updates.push(params);
  })
  .onRequest(acp.methods.client.session.requestPermission, async ({ params, agent }) => {
    const toolCallId = params.toolCall.toolCallId;
    summary.permissions.push({
      toolCallId,
      title: params.toolCall.title ?? null,
      optionIds: params.options.map((option) => option.optionId),
      updatesBefore: summary.updates.length,
    });
    if (toolCallId === "turn-wait") {
      await agent.notify(acp.methods.agent.session.cancel, { sessionId: params.sessionId });
      return { outcome: { outcome: "cancelled" } };
    }
    return { outcome: { outcome: "selected", optionId: "allow" } };
  });

const child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));

await app.connectWith(stream, async (agent) => {
  summary.initialize = await agent.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: {},
    clientInfo: { name: "ts-sdk-v1-turn-client", version: "2.4.0" },
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
  summary.cancelledPrompt = await prompt("wait");
});

child.stdin.end();
summary.agentExit = await exited;
process.stdout.write(JSON.stringify(summary) + "\n");
