// The TypeScript SDK's side of the remote benchmark: its AcpServer (the Node adapter, the `ws`
// package's WebSocketServer for upgrades) serving an agent written with the SDK, as its docs
// teach (`acp.agent(...).onRequest(...)`, one app per connection through `createAgent`).
//
// Run by ../bench_remote.py as `node ts_server.mjs` with ACP_INTEROP_NPM_DIR set (a directory
// holding @agentclientprotocol/sdk 2.4.0, zod and ws).  Serves /acp on 127.0.0.1, on a free port,
// prints {"port": N, "pid": P} on stdout and exits when its stdin closes.  The prompt commands are
// those of ../runtime/common.py, served as the stdio bench agent ../runtime/ts_agent.mjs serves
// them: "stream N" (N agent_message_chunk updates), "mixed N" (the same with a tool_call and a
// tool_call_update after every 10 chunks), "read N C" (N fs/read_text_file requests to the client,
// C in flight, each answer checked) and "permission N" (N session/request_permission, one at a
// time, "allow" expected); then it ends the turn.
import http from "node:http";
import { loadEsm } from "../../tests/interop/load_esm.mjs";

const acp = await loadEsm("@agentclientprotocol/sdk");
const { AcpServer } = await loadEsm("@agentclientprotocol/sdk/experimental/server");
const { createNodeHttpHandler, createNodeWebSocketUpgradeHandler } = await loadEsm(
  "@agentclientprotocol/sdk/experimental/node",
);
const { WebSocketServer } = await loadEsm("ws");

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
      const id = toolCallId(i);
      await update({ sessionUpdate: "tool_call", toolCallId: id, title: toolTitle(i), kind: "read", status: "pending" });
      await update({ sessionUpdate: "tool_call_update", toolCallId: id, status: "completed" });
    }
  }
}

async function permission(client, sessionId, n) {
  for (let i = 0; i < n; i++) {
    const { outcome } = await client.request(acp.methods.client.session.requestPermission, {
      sessionId,
      toolCall: { toolCallId: toolCallId(i), title: toolTitle(i), kind: "edit" },
      options: OPTIONS,
    });
    if (outcome.outcome !== "selected" || outcome.optionId !== "allow") {
      throw new Error(`permission ${i}: unexpected outcome ${JSON.stringify(outcome)}`);
    }
  }
}

async function read(client, sessionId, n, width) {
  let next = 0; // the next index to read, shared by `width` workers: that many requests in flight
  const worker = async () => {
    for (let i = next++; i < n; i = next++) {
      const { content } = await client.request(acp.methods.client.fs.readTextFile, { sessionId, path: filePath(i) });
      if (content !== FILE_CONTENT) {
        throw new Error(`read ${i}: unexpected content ${JSON.stringify(content)}`);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, width) }, worker));
}

const createAgent = () =>
  acp
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
      } else if (kind === "read") {
        await read(client, params.sessionId, Number(n), Number(width));
      } else if (kind === "permission") {
        await permission(client, params.sessionId, Number(n));
      } else {
        throw new Error(`unknown bench command ${params.prompt[0].text}`);
      }
      return { stopReason: "end_turn" };
    });

const server = new AcpServer({ createAgent });
const httpServer = http.createServer(createNodeHttpHandler(server));
httpServer.on("upgrade", createNodeWebSocketUpgradeHandler(server, new WebSocketServer({ noServer: true })));
httpServer.listen(0, "127.0.0.1", () => {
  process.stdout.write(JSON.stringify({ port: httpServer.address().port, pid: process.pid }) + "\n");
});
process.stdin.resume();
process.stdin.on("end", async () => {
  await server.close();
  httpServer.close();
  process.exit(0);
});
