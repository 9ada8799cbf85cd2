// An ACP client written with the official TypeScript SDK (@agentclientprotocol/sdk 2.4.0, its
// unstable v1 entry point) that serves an MCP server to the agent over ACP: McpOverAcpProvider
// answers mcp/message, and fromMcpServer runs a server of @modelcontextprotocol/server 2.4.0.
//
// Usage (tests/test_interop_mcp.py runs it with ACP_INTEROP_NPM_DIR set):
//   node ts_mcp_client.mjs <protocol version: 1 or 2> <cwd> <agent command> [agent args...]
// It spawns the agent, then: initialize, registers the MCP server "ts-tools" (tools add, count,
// slow; the resource notes://today; the prompt greet), session/new in <cwd> declaring it, then
// in version 1 one prompt "go" (the agent reports in an agent_message_chunk), in version 2 the
// extension request _interop/use_mcp {sessionId} (the agent answers its report; the entry point
// is experimental/v2/unstable), and session/close.  The tools:
//  - add {a, b}: the sum as text;
//  - count: three notifications/progress (when the request carries a progressToken), then "counted";
//  - slow: one notifications/progress "started", then waits until its request is aborted (the
//    agent withdrew it) and records that.
// It prints a JSON summary on stdout (initialize, the declaration, the updates, the stop reason,
// what the slow tool saw), or exits non-zero.
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { loadEsm } from "./load_esm.mjs";

const [protocol, cwd, command, ...args] = process.argv.slice(2);
const v2 = protocol === "2";
const acp = await loadEsm(v2 ? "@agentclientprotocol/sdk/experimental/v2/unstable" : "@agentclientprotocol/sdk/unstable");
const { fromMcpServer } = await loadEsm("@agentclientprotocol/sdk/experimental/mcp-server");
const { McpServer } = await loadEsm("@modelcontextprotocol/server");
const z = await loadEsm("zod");

const summary = { updates: [], slow: { started: false, aborted: false } };
let slowAborted;
const slowDone = new Promise((resolve) => {
  slowAborted = resolve;
});

async function progress(ctx, value, total, message) {
  const token = ctx.mcpReq._meta?.progressToken;
  if (token === undefined) {
    return;
  }
  await ctx.mcpReq.notify({
    method: "notifications/progress",
    params: { progressToken: token, progress: value, total, message },
  });
}

const tools = fromMcpServer(() => {
  const server = new McpServer({ name: "ts-tools", version: "2.4.0" });
  server.registerTool(
    "add",
    { description: "Add two numbers", inputSchema: z.object({ a: z.number(), b: z.number() }) },
    async ({ a, b }) => ({ content: [{ type: "text", text: String(a + b) }] }),
  );
  server.registerTool("count", { description: "Count to three" }, async (ctx) => {
    for (const step of [1, 2, 3]) {
      await progress(ctx, step, 3, `step ${step}`);
    }
    return { content: [{ type: "text", text: "counted" }] };
  });
  server.registerTool("slow", { description: "Wait until cancelled" }, async (ctx) => {
    summary.slow.started = true;
    await progress(ctx, 0, undefined, "started");
    await new Promise((resolve) => {
      if (ctx.mcpReq.signal.aborted) {
        resolve();
      }
      ctx.mcpReq.signal.addEventListener("abort", resolve, { once: true });
    });
    summary.slow.aborted = true;
    slowAborted();
    return { content: [{ type: "text", text: "aborted" }] };
  });
  server.registerResource("notes", "notes://today", { mimeType: "text/plain" }, async (uri) => ({
    contents: [{ uri: uri.href, mimeType: "text/plain", text: "buy milk" }],
  }));
  server.registerPrompt("greet", { argsSchema: z.object({ name: z.string() }) }, ({ name }) => ({
    messages: [{ role: "user", content: { type: "text", text: `Say hello to ${name}.` } }],
  }));
  return server;
});

const provider = new acp.McpOverAcpProvider();
const app = acp
  .client({ name: "ts-sdk-mcp-interop-client" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    summary.updates.push(params);
  })
  .onRequest(acp.methods.client.mcp.message, provider.handleRequest);

const child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));

await app.connectWith(stream, async (agent) => {
  const info = { name: "ts-sdk-mcp-interop-client", version: "2.4.0" };
  summary.initialize = await agent.request(
    acp.methods.agent.initialize,
    v2
      ? { protocolVersion: acp.PROTOCOL_VERSION, info, capabilities: {} }
      : { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {}, clientInfo: info },
  );
  const registration = provider.registerServer(agent, { name: "ts-tools", handler: tools.handler });
  summary.declaration = registration.declaration;
  const session = await agent.request(acp.methods.agent.session.new, {
    cwd,
    mcpServers: [registration.declaration],
  });
  summary.sessionId = session.sessionId;
  if (v2) {
    summary.report = await agent.request("_interop/use_mcp", { sessionId: session.sessionId });
  } else {
    const response = await agent.request(acp.methods.agent.session.prompt, {
      sessionId: session.sessionId,
      prompt: [{ type: "text", text: "go" }],
    });
    summary.stopReason = response.stopReason;
  }
  // the agent cancelled the slow call before answering; its abort reaches the tool soon after
  await Promise.race([slowDone, new Promise((resolve) => setTimeout(resolve, 5000))]);
  await agent.request(acp.methods.agent.session.close, { sessionId: session.sessionId });
  await registration.dispose();
});

child.stdin.end();
summary.agentExit = await exited;
await tools.close();
process.stdout.write(JSON.stringify(summary) + "\n");
