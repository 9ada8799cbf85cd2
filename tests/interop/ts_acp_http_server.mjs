// An ACP agent written with the official TypeScript SDK (@agentclientprotocol/sdk 2.4.0), served
// over Streamable HTTP by the SDK's own server (`AcpServer` with its node HTTP adapter).
//
// Run by tests/test_transport_http.py as `node ts_acp_http_server.mjs` with ACP_INTEROP_NPM_DIR
// set; it listens on 127.0.0.1 (an ephemeral port), prints `PORT <n>` on stdout, and closes the
// server on SIGTERM.  One agent per ACP connection (`createAgent`).  Every response carries
// `Set-Cookie: affinity=<n>` (n counts the requests) and the server prints, per request, a line
// `REQ <method> <acp-session-id or -> <cookie header or -> <authorization or ->` (tab-separated) on stderr, so the
// test can check what the client sent, and `CLOSED <method> <acp-session-id or ->` when a request's
// response closed (a stream's reader left).  The agent:
//  - session/new: a new session id `ts-http-<n>`;
//  - session/load: replays the session's chunks so far (as session/update, from any connection of
//    this server), then answers {} (loadSession is advertised);
//  - session/prompt "stream <n>": n agent_message_chunk updates "0".."n-1", stop reason end_turn;
//  - session/prompt "ask": a chunk "asking", a permission request for tool call http-ask, a chunk
//    "permission: <optionId or outcome>", stop reason end_turn;
//  - session/prompt "wait": a chunk "waiting", then waits for session/cancel and answers stop
//    reason "cancelled".
// With the argument `interop` it serves the agent of ts_agent.mjs instead (the interoperability
// script of tests/test_interop.py).
import http from "node:http";
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const dir = process.env.ACP_INTEROP_NPM_DIR;
if (!dir) {
  throw new Error("ACP_INTEROP_NPM_DIR is not set (the npm directory holding @agentclientprotocol/sdk)");
}
const require = createRequire(join(dir, "package.json"));
const load = (name) => import(pathToFileURL(require.resolve(name)).href);
const acp = await load("@agentclientprotocol/sdk");
const { AcpServer } = await load("@agentclientprotocol/sdk/experimental/server");
const { createNodeHttpHandler } = await load("@agentclientprotocol/sdk/experimental/node");

let nextSession = 0;
const histories = new Map(); // sessionId -> the texts of its chunks, for session/load

function textOf(prompt) {
  return prompt
    .filter((block) => block.type === "text")
    .map((block) => block.text)
    .join("");
}

function makeAgent() {
  const cancels = new Map(); // sessionId -> resolve of the running "wait" turn
  return acp
    .agent({ name: "ts-http-interop-agent" })
    .onRequest(acp.methods.agent.initialize, () => ({
      protocolVersion: acp.PROTOCOL_VERSION,
      agentCapabilities: { loadSession: true },
      authMethods: [],
      agentInfo: { name: "ts-http-interop-agent", version: "2.4.0" },
    }))
    .onRequest(acp.methods.agent.session.new, () => ({ sessionId: `ts-http-${++nextSession}` }))
    .onRequest(acp.methods.agent.session.load, async ({ params, client }) => {
      for (const text of histories.get(params.sessionId) ?? []) {
        await client.notify(acp.methods.client.session.update, {
          sessionId: params.sessionId,
          update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text } },
        });
      }
      return {};
    })
    .onRequest(acp.methods.agent.session.prompt, async ({ params, client }) => {
      const { sessionId } = params;
      const say = (text) => {
        histories.set(sessionId, [...(histories.get(sessionId) ?? []), text]);
        return client.notify(acp.methods.client.session.update, {
          sessionId,
          update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text } },
        });
      };
      const text = textOf(params.prompt);
      if (text.startsWith("stream ")) {
        const count = Number(text.slice(7));
        for (let i = 0; i < count; i++) {
          await say(String(i));
        }
        return { stopReason: "end_turn" };
      }
      if (text === "ask") {
        await say("asking");
        const answer = await client.request(acp.methods.client.session.requestPermission, {
          sessionId,
          toolCall: { toolCallId: "http-ask", title: "Write output.txt", kind: "edit" },
          options: [
            { optionId: "allow", name: "Allow", kind: "allow_once" },
            { optionId: "reject", name: "Reject", kind: "reject_once" },
          ],
        });
        const outcome = answer.outcome;
        await say(`permission: ${outcome.outcome === "selected" ? outcome.optionId : outcome.outcome}`);
        return { stopReason: "end_turn" };
      }
      if (text === "wait") {
        const cancelled = new Promise((resolve) => cancels.set(sessionId, resolve));
        await say("waiting");
        await cancelled;
        return { stopReason: "cancelled" };
      }
      return { stopReason: "end_turn" };
    })
    .onNotification(acp.methods.agent.session.cancel, ({ params }) => {
      cancels.get(params.sessionId)?.();
    });
}

const server =
  process.argv[2] === "interop"
    ? new AcpServer({ agent: (await import("./ts_agent.mjs")).app })
    : new AcpServer({ createAgent: makeAgent });
const handler = createNodeHttpHandler(server);
let requests = 0;
const httpServer = http.createServer((req, res) => {
  const header = (name) => req.headers[name] ?? "-";
  process.stderr.write(
    `REQ\t${req.method}\t${header("acp-session-id")}\t${header("cookie")}\t${header("authorization")}\n`,
  );
  res.setHeader("Set-Cookie", `affinity=${++requests}; Path=/`);
  // before the SDK's own listener (added in handler): once this is printed, the stream's reader is gone
  res.on("close", () => process.stderr.write(`CLOSED\t${req.method}\t${header("acp-session-id")}\n`));
  handler(req, res);
});
httpServer.listen(0, "127.0.0.1", () => {
  process.stdout.write(`PORT ${httpServer.address().port}\n`);
});
process.on("SIGTERM", () => {
  server.close();
  httpServer.close();
  httpServer.closeAllConnections?.();
  process.exit(0);
});
