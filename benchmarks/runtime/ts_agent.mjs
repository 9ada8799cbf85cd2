// The TypeScript SDK's bench agent (@agentclientprotocol/sdk 2.4.0), written as its README teaches
// for an agent: `agent({ name })`, `onRequest(methods.agent.…, handler)`, then `connect(stream)`
// with `ndJsonStream` over the process's stdio.  (2.4.0 has no AgentSideConnection class any more;
// this builder is what replaced it.)  Serves the commands of common.py (stream, mixed, read,
// permission); also the TypeScript agent of the start-up scenario.
//
// Run as `node ts_agent.mjs` with ACP_INTEROP_NPM_DIR set (the npm directory holding the SDK).
import { Readable, Writable } from "node:stream";
import { loadEsm } from "../../tests/interop/load_esm.mjs";

const acp = await loadEsm("@agentclientprotocol/sdk");

const SESSION_ID = "sess_bench_0001";
const FILE_CONTENT = "def hello():\n    return 'world'\n";
const TOOL_EVERY = 10;
const OPTIONS = [
  { optionId: "allow", name: "Allow", kind: "allow_once" },
  { optionId: "reject", name: "Reject", kind: "reject_once" },
];
const chunkText = (i) => `token ${i} of the streamed answer `;
const filePath = (i) => `/bench/src/module_${i % 97}.py`;
const toolCallId = (i) => `call_${i}`;
const toolTitle = (i) => `Read module_${i % 97}.py`;

async function stream(client, sessionId, n, mixed) {
  const update = (u) => client.notify(acp.methods.client.session.update, { sessionId, update: u });
  for (let i = 0; i < n; i++) {
    await update({ sessionUpdate: "agent_message_chunk", content: { type: "text", text: chunkText(i) } });
    if (mixed && i % TOOL_EVERY === TOOL_EVERY - 1) {
      await update({ sessionUpdate: "tool_call", toolCallId: toolCallId(i), title: toolTitle(i), kind: "read", status: "pending" });
      await update({ sessionUpdate: "tool_call_update", toolCallId: toolCallId(i), status: "completed" });
    }
  }
}

async function permission(client, sessionId, n) {
  for (let i = 0; i < n; i++) {
    const response = await client.request(acp.methods.client.session.requestPermission, {
      sessionId,
      toolCall: { toolCallId: toolCallId(i), title: toolTitle(i), kind: "edit" },
      options: OPTIONS,
    });
    if (response.outcome.outcome !== "selected" || response.outcome.optionId !== "allow") {
      throw new Error(`permission ${i}: unexpected outcome ${JSON.stringify(response.outcome)}`);
    }
  }
}

async function read(client, sessionId, n, width) {
  let next = 0; // shared by the workers: `width` requests in flight
  const worker = async () => {
    while (next < n) {
      const i = next++;
      const response = await client.request(acp.methods.client.fs.readTextFile, { sessionId, path: filePath(i) });
      if (response.content !== FILE_CONTENT) {
        throw new Error(`read ${i}: unexpected content ${response.content}`);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, width) }, worker));
}

const app = acp
  .agent({ name: "bench-ts-agent" })
  .onRequest(acp.methods.agent.initialize, () => ({
    protocolVersion: acp.PROTOCOL_VERSION,
    agentCapabilities: {},
    authMethods: [],
  }))
  .onRequest(acp.methods.agent.session.new, () => ({ sessionId: SESSION_ID }))
  .onRequest(acp.methods.agent.session.prompt, async ({ params, client }) => {
    const [kind, n, width] = params.prompt[0].text.split(" ");
    if (kind === "stream" || kind === "mixed") {
      await stream(client, params.sessionId, Number(n), kind === "mixed");
    } else if (kind === "permission") {
      await permission(client, params.sessionId, Number(n));
    } else if (kind === "read") {
      await read(client, params.sessionId, Number(n), Number(width));
    } else {
      throw new Error(`unknown bench command ${params.prompt[0].text}`);
    }
    return { stopReason: "end_turn" };
  });

const connection = app.connect(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
await connection.closed;
