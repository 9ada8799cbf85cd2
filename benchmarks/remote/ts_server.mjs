// The TypeScript SDK's side of the remote benchmark: its AcpServer (the Node adapter, the `ws`
// package's WebSocketServer for upgrades) serving an agent written with the SDK, as its docs
// teach (`acp.agent(...).onRequest(...)`, one app per connection through `createAgent`).
//
// Run by ../bench_remote.py as `node ts_server.mjs` with ACP_INTEROP_NPM_DIR set (a directory
// holding @agentclientprotocol/sdk 2.4.0, zod and ws).  Serves /acp on 127.0.0.1, on a free port,
// prints {"port": N} on stdout and exits when its stdin closes.  The prompt commands are those of
// ../runtime/common.py: "stream N" sends N agent_message_chunk updates, then ends the turn.
import http from "node:http";
import { loadEsm } from "../../tests/interop/load_esm.mjs";

const acp = await loadEsm("@agentclientprotocol/sdk");
const { AcpServer } = await loadEsm("@agentclientprotocol/sdk/experimental/server");
const { createNodeHttpHandler, createNodeWebSocketUpgradeHandler } = await loadEsm(
  "@agentclientprotocol/sdk/experimental/node",
);
const { WebSocketServer } = await loadEsm("ws");

const SESSION_ID = "sess_bench_0001";

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
      const words = params.prompt[0].text.split(" ");
      if (words[0] !== "stream") {
        throw new Error(`unknown bench command ${params.prompt[0].text}`);
      }
      const n = Number(words[1]);
      for (let i = 0; i < n; i++) {
        await client.notify(acp.methods.client.session.update, {
          sessionId: params.sessionId,
          update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: `token ${i} of the streamed answer ` } },
        });
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
