// The TypeScript SDK's client side of the remote benchmark, written as its docs teach:
// `acp.client(...).onNotification(...).connectWith(stream, ...)` over createWebSocketStream
// (ws:// URL; `ws` as the WebSocket class, Node 20 having none) or createHttpStream (http:// URL).
//
// Usage: node ts_client.mjs URL WARMUP REPEATS COMMAND...  (ACP_INTEROP_NPM_DIR set; commands as
// in ../runtime/common.py).  Prints {"<command>": [seconds, ...]}: for each command WARMUP
// unmeasured prompts then REPEATS measured ones, from sending session/prompt to its response.
import { performance } from "node:perf_hooks";
import { loadEsm } from "../../tests/interop/load_esm.mjs";

const acp = await loadEsm("@agentclientprotocol/sdk");
const [url, warmupText, repeatsText, ...commands] = process.argv.slice(2);
const warmup = Number(warmupText);
const repeats = Number(repeatsText);

let stream;
if (url.startsWith("ws")) {
  const { createWebSocketStream } = await loadEsm("@agentclientprotocol/sdk/experimental/ws-client");
  const { WebSocket } = await loadEsm("ws");
  stream = createWebSocketStream(url, { WebSocket });
} else {
  const { createHttpStream } = await loadEsm("@agentclientprotocol/sdk/experimental/http-client");
  stream = createHttpStream(url);
}

let updates = 0;
const app = acp
  .client({ name: "bench-ts-client" })
  .onNotification(acp.methods.client.session.update, () => {
    updates += 1;
  });
const results = {};
await app.connectWith(stream, async (ctx) => {
  await ctx.request(acp.methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} });
  const session = await ctx.request(acp.methods.agent.session.new, { cwd: process.cwd(), mcpServers: [] });
  for (const command of commands) {
    const n = Number(command.split(" ")[1]);
    const times = (results[command] = []);
    for (let k = 0; k < warmup + repeats; k++) {
      updates = 0;
      const start = performance.now();
      const response = await ctx.request(acp.methods.agent.session.prompt, {
        sessionId: session.sessionId,
        prompt: [{ type: "text", text: command }],
      });
      const elapsed = (performance.now() - start) / 1000;
      if (response.stopReason !== "end_turn" || updates !== n) {
        throw new Error(`${command}: stop reason ${response.stopReason}, ${updates} of ${n} handled`);
      }
      if (k >= warmup) times.push(elapsed);
    }
  }
});
process.stdout.write(JSON.stringify(results) + "\n");
process.exit(0);
