// The TypeScript SDK's remote server (@agentclientprotocol/sdk/experimental/server, AcpServer with
// its Node adapter and the `ws` package's WebSocketServer) serving the agent of ts_agent.mjs.
//
// Run by tests/test_interop_websocket.py as `node ts_ws_server.mjs` with ACP_INTEROP_NPM_DIR set
// (a directory holding the SDK, zod and ws).  It listens on 127.0.0.1 on a free port, prints
// {"port": N} on stdout, and serves /acp until killed.
import http from "node:http";
import { loadEsm } from "./load_esm.mjs";
import { app } from "./ts_agent.mjs";

const { AcpServer } = await loadEsm("@agentclientprotocol/sdk/experimental/server");
const { createNodeHttpHandler, createNodeWebSocketUpgradeHandler } = await loadEsm(
  "@agentclientprotocol/sdk/experimental/node",
);
const { WebSocketServer } = await loadEsm("ws");

const server = new AcpServer({ agent: app });
const webSocketServer = new WebSocketServer({ noServer: true });
const httpServer = http.createServer(createNodeHttpHandler(server));
httpServer.on("upgrade", createNodeWebSocketUpgradeHandler(server, webSocketServer));
httpServer.listen(0, "127.0.0.1", () => {
  process.stdout.write(JSON.stringify({ port: httpServer.address().port }) + "\n");
});
