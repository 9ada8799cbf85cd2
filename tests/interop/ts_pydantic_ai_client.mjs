// A version-1 client written with the official TypeScript SDK (@agentclientprotocol/sdk 2.4.0)
// that drives one prompt turn of the example pydantic-ai agent: tests/test_pydantic_ai_interop.py
// runs it against `python -m acp_trio.integrations.pydantic_ai examples.pydantic_ai_agent.agent:agent`.
//
// Usage: node ts_pydantic_ai_client.mjs <cwd> <mcpServers JSON> <prompt> <agent command> [agent args...]
// (ACP_INTEROP_NPM_DIR set).  It spawns the agent, then: initialize (protocol version 1, no fs or
// terminal), session/new in <cwd> with the given MCP servers, and the prompt; it answers every
// session/request_permission with the first option of kind allow_once (else allow_always).  Every
// session/update is recorded raw, in arrival order, with the permission requests and how many
// updates came before each.  It prints a JSON summary on stdout, or exits non-zero.
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { loadSdk } from "./load_sdk.mjs";

const acp = await loadSdk();
const [cwd, mcpServers, text, command, ...args] = process.argv.slice(2);

const summary = { updates: [], permissions: [] };

const app = acp
  .client({ name: "ts-sdk-pydantic-ai-client" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    summary.updates.push(params);
  })
  .onRequest(acp.methods.client.session.requestPermission, async ({ params }) => {
    const allow =
      params.options.find((option) => option.kind === "allow_once") ??
      params.options.find((option) => option.kind === "allow_always");
    summary.permissions.push({
      toolCallId: params.toolCall.toolCallId,
      title: params.toolCall.title ?? null,
      kinds: params.options.map((option) => option.kind),
      chosen: allow ? allow.optionId : null,
      updatesBefore: summary.updates.length,
    });
    return allow
      ? { outcome: { outcome: "selected", optionId: allow.optionId } }
      : { outcome: { outcome: "cancelled" } };
  });

const child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));

await app.connectWith(stream, async (agent) => {
  summary.initialize = await agent.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: {},
    clientInfo: { name: "ts-sdk-pydantic-ai-client", version: "2.4.0" },
  });
  const session = await agent.request(acp.methods.agent.session.new, { cwd, mcpServers: JSON.parse(mcpServers) });
  summary.sessionId = session.sessionId;
  summary.prompt = await agent.request(acp.methods.agent.session.prompt, {
    sessionId: session.sessionId,
    prompt: [{ type: "text", text }],
  });
  summary.updatesAfterPrompt = summary.updates.length;
});

child.stdin.end();
summary.agentExit = await exited;
process.stdout.write(JSON.stringify(summary) + "\n");
