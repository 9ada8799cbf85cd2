// An ACP agent written with the official TypeScript SDK (@agentclientprotocol/sdk 2.4.0, its
// unstable v1 entry point) that calls the MCP servers its client serves over ACP, with the SDK's
// McpOverAcpCaller.
//
// Run by tests/test_interop_mcp.py as `node ts_mcp_agent.mjs <protocol version: 1 or 2>` with
// ACP_INTEROP_NPM_DIR set; acp-trio's client drives it over stdio and serves an MCP server (tools
// add, count, slow; the resource notes://today; the prompt greet).  Version 2 uses the entry
// point experimental/v2/unstable.
//  - initialize: v1 mcpCapabilities.acp and agentInfo, v2 capabilities.session.mcp.acp and info
//    (ts-sdk-mcp-interop-agent);
//  - session/new: keeps the session's acp MCP servers;
//  - the report: on the first acp server, in order: server/discover, tools/list, tools/call
//    add {2, 3}, tools/call count with a progressToken (the progress notifications are
//    collected), resources/read notes://today, prompts/get greet {name: Ada}, tools/call nope
//    (no such tool), a request to a serverId nobody declared, and tools/call slow with a
//    progressToken, withdrawn (its AbortSignal, so $/cancel_request) once the tool reported its
//    first progress: a JSON object of what it got (inner results and errors as the caller
//    returned them, outer errors as {outer: {code, message, data}});
//  - v1 session/prompt: says the report in one agent_message_chunk and answers end_turn;
//  - the extension request _interop/use_mcp {sessionId} answers the report (both versions: the
//    v2 client uses it, so that the v2 prompt lifecycle stays out of this test).
import { Readable, Writable } from "node:stream";
import { loadEsm } from "./load_esm.mjs";

const v2 = process.argv[2] === "2";
const acp = await loadEsm(v2 ? "@agentclientprotocol/sdk/experimental/v2/unstable" : "@agentclientprotocol/sdk/unstable");

const caller = new acp.McpOverAcpCaller({ clientInfo: { name: "ts-sdk-mcp-interop-agent", version: "2.4.0" } });
const sessions = new Map(); // sessionId -> the acp servers it declared
let nextSession = 0;

function outerError(error) {
  if (typeof error?.code !== "number") {
    throw error;
  }
  return { outer: { code: error.code, message: error.message, data: error.data ?? null } };
}

async function attempt(promise) {
  try {
    return await promise;
  } catch (error) {
    return outerError(error);
  }
}

async function use(client, serverId) {
  const call = (method, params, options) => attempt(caller.request(client, serverId, method, params, options));
  const seen = {};
  seen.discover = await call("server/discover", {});
  seen.tools = await call("tools/list", {});
  seen.add = await call("tools/call", { name: "add", arguments: { a: 2, b: 3 } });
  const progress = [];
  seen.count = await call(
    "tools/call",
    { name: "count", arguments: {}, _meta: { progressToken: "count-1" } },
    { onNotification: (notification) => progress.push(notification) },
  );
  seen.progress = progress;
  seen.resource = await call("resources/read", { uri: "notes://today" });
  seen.prompt = await call("prompts/get", { name: "greet", arguments: { name: "Ada" } });
  seen.nope = await call("tools/call", { name: "nope", arguments: {} });
  seen.nobody = await attempt(caller.request(client, "nobody", "tools/list", {}));

  const abort = new AbortController();
  seen.slow = await call(
    "tools/call",
    { name: "slow", arguments: {}, _meta: { progressToken: "slow-1" } },
    { signal: abort.signal, onNotification: () => abort.abort() },
  );
  return seen;
}

async function report(client, sessionId) {
  const servers = sessions.get(sessionId) ?? [];
  const seen = { servers };
  if (servers.length > 0) {
    Object.assign(seen, await use(client, servers[0].serverId));
  }
  return seen;
}

const info = { name: "ts-sdk-mcp-interop-agent", version: "2.4.0" };
let app = acp
  .agent({ name: "ts-sdk-mcp-interop-agent" })
  .onNotification(acp.methods.agent.mcp.message, caller.handleNotification)
  .onRequest(acp.methods.agent.initialize, () =>
    v2
      ? { protocolVersion: acp.PROTOCOL_VERSION, info, capabilities: { session: { mcp: { acp: {} } } } }
      : { protocolVersion: acp.PROTOCOL_VERSION, agentCapabilities: { mcpCapabilities: { acp: true } }, agentInfo: info },
  )
  .onRequest(acp.methods.agent.session.new, ({ params }) => {
    const sessionId = `ts-mcp-session-${++nextSession}`;
    sessions.set(sessionId, (params.mcpServers ?? []).filter(acp.isMcpServerAcp));
    return { sessionId };
  })
  .onRequest(
    "_interop/use_mcp",
    (params) => params,
    ({ params, client }) => report(client, params.sessionId),
  );
if (!v2) {
  app = app.onRequest(acp.methods.agent.session.prompt, async ({ params, client }) => {
    const seen = await report(client, params.sessionId);
    await client.notify(acp.methods.client.session.update, {
      sessionId: params.sessionId,
      update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: JSON.stringify(seen) } },
    });
    return { stopReason: "end_turn" };
  });
}

const connection = app.connect(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
await connection.closed;
