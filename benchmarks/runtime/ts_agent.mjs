// The TypeScript SDK's bench agent (@agentclientprotocol/sdk 2.4.0), written as its README teaches
// for an agent: `agent({ name })`, `onRequest(methods.agent.…, handler)`, then `connect(stream)`
// with `ndJsonStream` over the process's stdio.  (2.4.0 has no AgentSideConnection class any more;
// this builder is what replaced it.)  Serves the commands of common.py (ts_bench.mjs); also
// the TypeScript agent of the start-up scenario.
//
// Run as `node ts_agent.mjs` with ACP_INTEROP_NPM_DIR set (the npm directory holding the SDK).
import { Readable, Writable } from "node:stream";
import { loadEsm } from "../../tests/interop/load_esm.mjs";
import { createBenchAgent } from "./ts_bench.mjs";

const acp = await loadEsm("@agentclientprotocol/sdk");

const app = createBenchAgent(acp);

const connection = app.connect(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
await connection.closed;
