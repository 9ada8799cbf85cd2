// The TypeScript SDK's side of the remote benchmark: its AcpServer (the Node adapter, the `ws`
// package's WebSocketServer for upgrades) serving an agent written with the SDK, as its docs
// teach (`acp.agent(...).onRequest(...)`, one app per connection through `createAgent`).
//
// Run by ../bench_remote.py as `node ts_server.mjs` with ACP_INTEROP_NPM_DIR set (a directory
// holding @agentclientprotocol/sdk 2.4.0, zod and ws).  Serves /acp on 127.0.0.1, on a free port,
// prints {"port": N, "pid": P} on stdout and exits when its stdin closes.  The prompt commands are
// those of ../runtime/common.py, served by the same agent as the stdio bench agent
// (../runtime/ts_bench.mjs).
import http from "node:http";
import { loadEsm } from "../../tests/interop/load_esm.mjs";
import { createBenchAgent } from "../runtime/ts_bench.mjs";

const acp = await loadEsm("@agentclientprotocol/sdk");
const { AcpServer } = await loadEsm("@agentclientprotocol/sdk/experimental/server");
const { createNodeHttpHandler, createNodeWebSocketUpgradeHandler } = await loadEsm(
  "@agentclientprotocol/sdk/experimental/node",
);
const { WebSocketServer } = await loadEsm("ws");

const createAgent = () => createBenchAgent(acp);

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
