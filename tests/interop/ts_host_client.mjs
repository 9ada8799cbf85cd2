// A client written with the official TypeScript SDK (@agentclientprotocol/sdk 2.4.0: the v1 entry
// point, or experimental/v2) that leaves a session host mid-turn, or comes back to it:
// tests/test_host_ts.py runs it against `python -m acp_trio.bridge --listen --detach` and against
// AcpApp(host=open_session_host(...)), over WebSocket (experimental/ws-client, with the `ws`
// package's WebSocket) or Streamable HTTP (experimental/http-client).
//
// Usage: node ts_host_client.mjs '<json>'   (ACP_INTEROP_NPM_DIR set: the npm directory holding
// the SDK, zod and ws).  The JSON object:
//   version    1 or 2: the protocol the client speaks (its initialize, its entry point)
//   url        ws://HOST:PORT/acp or http://HOST:PORT/acp
//   token      optional: sent as Authorization: Bearer TOKEN (on the upgrade, on every HTTP request)
//   cwd        the session directory
//   attach     optional: an attach token a previous initialize answer gave (_meta "acp-trio/attach"),
//              sent back in this client's initialize params' _meta
//   leave      "close" or "kill": initialize, session/new, a "summarize" prompt; once `leaveAfter`
//              numbered updates arrived (or the agent asked permission, which it never answers), it
//              leaves.  "close": its connectWith callback returns, so the SDK closes the stream
//              (WebSocket close, HTTP DELETE); a v1 client's pending session/prompt call then fails
//              locally.  "kill": it writes its summary and sends itself SIGKILL (no close frame, no
//              DELETE: the server sees the socket or the SSE stream drop, or nothing at all).
//              "stay": it prints {"sessionId"} as a first line once the session is made, never
//              answers a permission request (it records whether the request was withdrawn:
//              `withdrawn`, the abort's error code), and stays until the turn's end (v2 a numbered
//              state_update idle, v1 the prompt's answer).
//   sessionId  instead of `leave`: come back to this session: v2 session/resume (with `replayFrom`
//              when given, verbatim), v1 session/load; answer each permission request with its
//              allow_once option, and stay until the turn's end: v2 a numbered state_update idle,
//              v1 the host's extension notification _acp_trio/turn_ended.  An error answer to the
//              resume or load is recorded and the client leaves.
//   probes     optional, v2: `replayFrom` values tried first, each in a session/resume whose answer
//              (an error, expected) is recorded in the summary's `probes`, before the resume above.
//   stranger   optional, with `sessionId`: {token, attach}: before coming back, the same process
//              tries it on a connection of its own under that bearer token and attach token (both
//              replace this config's), with no probes; its summary is the summary's `stranger`.
// Every session/update is recorded in arrival order with the host's number (_meta
// "acp-trio/update") or its current-state mark (_meta "acp-trio/current").  It prints a JSON
// summary on stdout, or exits non-zero.
import { writeSync } from "node:fs";
import { loadEsm } from "./load_esm.mjs";

const config = JSON.parse(process.argv[2]);
const v2 = config.version === 2;
const acp = await loadEsm(v2 ? "@agentclientprotocol/sdk/experimental/v2" : "@agentclientprotocol/sdk");
const { createHttpStream } = await loadEsm("@agentclientprotocol/sdk/experimental/http-client");
const { createWebSocketStream } = await loadEsm("@agentclientprotocol/sdk/experimental/ws-client");
const { WebSocket } = await loadEsm("ws");

async function errorOf(promise) {
  try {
    return { result: await promise };
  } catch (error) {
    return { error: { code: error.code ?? null, message: error.message, data: error.data ?? null } };
  }
}

// One client connection playing `config`; its summary.
async function run(config) {
  const headers = config.token ? { Authorization: `Bearer ${config.token}` } : {};

  const stream = config.url.startsWith("http")
    ? createHttpStream(config.url, { headers })
    : createWebSocketStream(config.url, { WebSocket, headers });

  const summary = { updates: [], permissions: [], turnEnded: [] };
  let wake = () => {};
  const changed = () => {
    const resolve = wake;
    wake = () => {};
    resolve();
  };
  async function until(predicate) {
    while (!predicate()) {
      await new Promise((resolve) => {
        wake = resolve;
      });
    }
  }
  const numbered = () => summary.updates.filter((u) => u.n !== null);
  const ended = () =>
    v2 ? numbered().some((u) => u.kind === "state_update" && u.state === "idle") : summary.turnEnded.length > 0;

  let app = acp
    .client({ name: "ts-sdk-host-client" })
    .onNotification(acp.methods.client.session.update, ({ params }) => {
      const meta = params._meta ?? {};
      const update = params.update;
      summary.updates.push({
        n: meta["acp-trio/update"] ?? null,
        current: meta["acp-trio/current"] === true,
        kind: update.sessionUpdate,
        state: update.state ?? null,
        stopReason: update.stopReason ?? null,
        text: update.content?.type === "text" ? update.content.text : null,
      });
      changed();
    })
    .onRequest(acp.methods.client.session.requestPermission, async ({ params, signal }) => {
      const toolCall = v2 ? params.subject?.toolCall : params.toolCall;
      const asked = {
        sessionId: params.sessionId,
        toolCallId: toolCall?.toolCallId ?? null,
        updatesBefore: numbered().length,
        answered: config.leave === undefined,
        withdrawn: null,
      };
      summary.permissions.push(asked);
      changed();
      if (config.leave !== undefined) {
        // a client that leaves or stays never answers: the request waits in the host for another client
        await new Promise((_resolve, reject) =>
          signal.addEventListener("abort", () => {
            asked.withdrawn = signal.reason?.code ?? String(signal.reason);
            changed();
            reject(signal.reason);
          }),
        );
      }
      const allow = params.options.find((option) => option.kind === "allow_once");
      return { outcome: { outcome: "selected", optionId: allow.optionId } };
    });
  if (!v2) {
    app = app.onNotification("_acp_trio/turn_ended", (params) => params, ({ params }) => {
      summary.turnEnded.push(params);
      changed();
    });
  }

  await app.connectWith(stream, async (agent) => {
    const meta = config.attach ? { _meta: { "acp-trio/attach": config.attach } } : {};
    summary.initialize = await agent.request(
      acp.methods.agent.initialize,
      v2
        ? { protocolVersion: 2, info: { name: "ts-sdk-host-client", version: "2.4.0" }, capabilities: {}, ...meta }
        : {
            protocolVersion: 1,
            clientCapabilities: {},
            clientInfo: { name: "ts-sdk-host-client", version: "2.4.0" },
            ...meta,
          },
    );
    if (config.leave !== undefined) {
      const session = await agent.request(acp.methods.agent.session.new, { cwd: config.cwd, mcpServers: [] });
      summary.sessionId = session.sessionId;
      if (config.leave === "stay") {
        writeSync(1, JSON.stringify({ sessionId: session.sessionId }) + "\n");
      }
      const prompt = agent.request(acp.methods.agent.session.prompt, {
        sessionId: session.sessionId,
        prompt: [{ type: "text", text: "summarize" }],
      });
      if (v2) {
        summary.prompt = await prompt; // v2: answered when the agent accepts the prompt; the turn goes on
      } else if (config.leave === "stay") {
        summary.prompt = await prompt; // v1: answered at the turn's end
      } else {
        prompt.catch(() => {}); // v1: answered at the turn's end; it fails when this client leaves
      }
      if (config.leave === "stay") {
        await until(() => !v2 || ended());
        return;
      }
      await until(() => numbered().length >= config.leaveAfter || summary.permissions.length > 0);
      summary.left = { updates: numbered().length, asked: summary.permissions.length };
      if (config.leave === "kill") {
        writeSync(1, JSON.stringify(summary) + "\n");
        process.kill(process.pid, "SIGKILL");
      }
      return; // leave: the SDK closes the stream
    }
    summary.sessionId = config.sessionId;
    summary.probes = [];
    for (const replayFrom of config.probes ?? []) {
      const resume = { sessionId: config.sessionId, cwd: config.cwd, replayFrom };
      summary.probes.push(await errorOf(agent.request(acp.methods.agent.session.resume, resume)));
    }
    const answer = await errorOf(
      v2
        ? agent.request(acp.methods.agent.session.resume, {
            sessionId: config.sessionId,
            cwd: config.cwd,
            ...(config.replayFrom ? { replayFrom: config.replayFrom } : {}),
          })
        : agent.request(acp.methods.agent.session.load, {
            sessionId: config.sessionId,
            cwd: config.cwd,
            mcpServers: [],
          }),
    );
    summary.attach = answer; // { result } or { error: { code, message, data } }
    if (answer.error) {
      return;
    }
    await until(ended);
  });
  return summary;
}

let stranger;
if (config.stranger) {
  stranger = await run({ ...config, ...config.stranger, stranger: undefined, probes: undefined });
}
const summary = await run(config);
if (stranger) {
  summary.stranger = stranger;
}
process.stdout.write(JSON.stringify(summary) + "\n");
