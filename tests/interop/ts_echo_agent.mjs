// A plain echo agent written with the official TypeScript SDK (@agentclientprotocol/sdk 2.4.0), in
// the shape the SDK's README teaches: an `acp.agent(...)` app with handlers for initialize,
// session/new, session/prompt and session/cancel, connected to stdio with ndJsonStream.
//
// The conformance runs (tests/interop/conformance_real.py, agent "ts-sdk") check it: unlike
// ts_agent.mjs, which plays the interop tests' script (it reads and writes files through a client
// that it knows offers them), it does only what any agent may do with any client: it streams the
// prompt's text back word by word (20 ms apart, so a session/cancel lands mid-turn) and ends the
// turn "end_turn", or "cancelled" once session/cancel arrived.
import { resolve } from "node:path";
import { Readable, Writable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { pathToFileURL } from "node:url";
import { loadSdk } from "./load_sdk.mjs";

const acp = await loadSdk();
const cancelled = new Map(); // sessionId -> true once session/cancel arrived during the turn
let nextSession = 0;

const app = acp
  .agent({ name: "ts-sdk-echo-agent" })
  .onRequest(acp.methods.agent.initialize, () => ({
    protocolVersion: acp.PROTOCOL_VERSION,
    agentCapabilities: { loadSession: false },
    authMethods: [],
    agentInfo: { name: "ts-sdk-echo-agent", version: "2.4.0" },
  }))
  .onRequest(acp.methods.agent.session.new, () => ({ sessionId: `ts-echo-${++nextSession}` }))
  .onRequest(acp.methods.agent.session.prompt, async ({ params, client }) => {
    const { sessionId } = params;
    cancelled.set(sessionId, false);
    const text = params.prompt
      .filter((block) => block.type === "text")
      .map((block) => block.text)
      .join(" ");
    for (const word of `You said: ${text}`.split(" ")) {
      if (cancelled.get(sessionId)) {
        return { stopReason: "cancelled" };
      }
      await client.notify(acp.methods.client.session.update, {
        sessionId,
        update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: `${word} ` } },
      });
      await sleep(20);
    }
    return { stopReason: cancelled.get(sessionId) ? "cancelled" : "end_turn" };
  })
  .onNotification(acp.methods.agent.session.cancel, ({ params }) => {
    cancelled.set(params.sessionId, true);
  });

if (import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const connection = app.connect(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
  await connection.closed;
}
