// The TypeScript SDK's client side of the remote benchmark, written as its docs teach:
// `acp.client(...).onNotification(...).onRequest(...).connectWith(stream, ...)` over
// createWebSocketStream (ws:// URL; `ws` as the WebSocket class, Node 20 having none) or
// createHttpStream (http:// URL).  The handlers are those of ../runtime/ts_client.mjs (the stdio
// bench client): count the session/update notifications, answer fs/read_text_file with the bench
// file's content and session/request_permission with "allow", counting each; it advertises
// fs.readTextFile.
//
// Usage: node ts_client.mjs URL WARMUP REPEATS COMMAND...  (ACP_INTEROP_NPM_DIR set; commands as
// in ../runtime/common.py: stream, mixed, read, permission).  Prints {"<command>": [seconds, ...]}:
// for each command WARMUP unmeasured prompts then REPEATS measured ones, from sending session/prompt
// to its response; each must end the turn having handled every update or request the command asks.
import { performance } from "node:perf_hooks";
import { loadEsm } from "../../tests/interop/load_esm.mjs";
import { createBenchClient } from "../runtime/ts_bench.mjs";

const acp = await loadEsm("@agentclientprotocol/sdk");
const [url, warmupText, repeatsText, ...commands] = process.argv.slice(2);
const warmup = Number(warmupText);
const repeats = Number(repeatsText);
const TOOL_EVERY = 10;

let stream;
if (url.startsWith("ws")) {
  const { createWebSocketStream } = await loadEsm("@agentclientprotocol/sdk/experimental/ws-client");
  const { WebSocket } = await loadEsm("ws");
  stream = createWebSocketStream(url, { WebSocket });
} else {
  const { createHttpStream } = await loadEsm("@agentclientprotocol/sdk/experimental/http-client");
  stream = createHttpStream(url);
}

const counts = { updates: 0, reads: 0, permissions: 0 };
const app = createBenchClient(acp, counts);
const results = {};
await app.connectWith(stream, async (ctx) => {
  await ctx.request(acp.methods.agent.initialize, {
    protocolVersion: 1,
    clientCapabilities: { fs: { readTextFile: true } },
  });
  const session = await ctx.request(acp.methods.agent.session.new, { cwd: process.cwd(), mcpServers: [] });
  for (const command of commands) {
    const [kind, nText] = command.split(" ");
    const n = Number(nText);
    const want = kind === "mixed" ? n + 2 * Math.floor(n / TOOL_EVERY) : n;
    const times = (results[command] = []);
    for (let k = 0; k < warmup + repeats; k++) {
      counts.updates = counts.reads = counts.permissions = 0;
      const start = performance.now();
      const response = await ctx.request(acp.methods.agent.session.prompt, {
        sessionId: session.sessionId,
        prompt: [{ type: "text", text: command }],
      });
      const elapsed = (performance.now() - start) / 1000;
      const got = kind === "stream" || kind === "mixed" ? counts.updates : kind === "read" ? counts.reads : counts.permissions;
      if (response.stopReason !== "end_turn" || got !== want) {
        throw new Error(`${command}: stop reason ${response.stopReason}, ${got} of ${want} handled`);
      }
      if (k >= warmup) times.push(elapsed);
    }
  }
});
process.stdout.write(JSON.stringify(results) + "\n");
process.exit(0);
