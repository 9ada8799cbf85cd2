// An ACP agent written with the official TypeScript SDK (@agentclientprotocol/sdk 2.4.0).
//
// Run by tests/test_interop.py as `node ts_agent.mjs` with ACP_INTEROP_NPM_DIR set; acp-trio's
// client drives it over stdio.  It plays the same script as tests/interop/trio_agent.py:
//  - session/prompt "wait": a chunk "waiting", a permission request for tool call interop-wait,
//    then it waits for session/cancel, reports the permission outcome in a chunk and answers
//    stop reason "cancelled";
//  - any other prompt: chunks "Hello", " from", " the TypeScript SDK", a permission request for
//    tool call interop-write; on "allow" it reads <cwd>/input.txt and writes <cwd>/output.txt
//    ("echo: " + input) through the client, reporting each step in a chunk; stop reason end_turn;
//  - the extension request _interop/echo answers {echo: params}; _interop/missing is not
//    registered, so the SDK answers -32601.
import { join, resolve } from "node:path";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";
import { loadSdk } from "./load_sdk.mjs";

const acp = await loadSdk();

const OPTIONS = [
  { optionId: "allow", name: "Allow", kind: "allow_once" },
  { optionId: "reject", name: "Reject", kind: "reject_once" },
];

const sessions = new Map(); // sessionId -> { cwd, cancelled: Promise | null, cancel: () => void }
let nextSession = 0;

function textOf(prompt) {
  return prompt
    .filter((block) => block.type === "text")
    .map((block) => block.text)
    .join("");
}

function choiceOf(response) {
  const outcome = response.outcome;
  return outcome.outcome === "selected" ? outcome.optionId : outcome.outcome;
}

async function prompt({ params, client }) {
  const { sessionId } = params;
  const session = sessions.get(params.sessionId);
  if (!session) {
    throw acp.RequestError.resourceNotFound(sessionId);
  }
  const say = (text) =>
    client.notify(acp.methods.client.session.update, {
      sessionId,
      update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text } },
    });
  const ask = (toolCallId) =>
    client.request(acp.methods.client.session.requestPermission, {
      sessionId,
      toolCall: { toolCallId, title: "Write output.txt", kind: "edit" },
      options: OPTIONS,
    });

  if (textOf(params.prompt) === "wait") {
    // Armed before the first await, so a session/cancel that arrives at any point is seen.
    session.cancelled = new Promise((resolve) => {
      session.cancel = resolve;
    });
    await say("waiting");
    const permission = ask("interop-wait");
    permission.catch(() => {}); // awaited below; don't let Node call a rejection unhandled meanwhile
    await session.cancelled;
    const answer = await permission;
    await say(`permission: ${choiceOf(answer)}`);
    return { stopReason: "cancelled" };
  }

  for (const chunk of ["Hello", " from", " the TypeScript SDK"]) {
    await say(chunk);
  }
  const choice = choiceOf(await ask("interop-write"));
  await say(`permission: ${choice}`);
  if (choice !== "allow") {
    return { stopReason: "end_turn" };
  }
  const read = await client.request(acp.methods.client.fs.readTextFile, {
    sessionId,
    path: join(session.cwd, "input.txt"),
  });
  await say(`read: ${read.content}`);
  await client.request(acp.methods.client.fs.writeTextFile, {
    sessionId,
    path: join(session.cwd, "output.txt"),
    content: `echo: ${read.content}`,
  });
  await say("wrote output.txt");
  return { stopReason: "end_turn" };
}

const app = acp
  .agent({ name: "ts-sdk-interop-agent" })
  .onRequest(acp.methods.agent.initialize, () => ({
    protocolVersion: acp.PROTOCOL_VERSION,
    agentCapabilities: { loadSession: false },
    authMethods: [],
    agentInfo: { name: "ts-sdk-interop-agent", version: "2.4.0" },
  }))
  .onRequest(acp.methods.agent.session.new, ({ params }) => {
    const sessionId = `ts-session-${++nextSession}`;
    sessions.set(sessionId, { cwd: params.cwd, cancelled: null, cancel: () => {} });
    return { sessionId };
  })
  .onRequest(acp.methods.agent.session.prompt, prompt)
  .onNotification(acp.methods.agent.session.cancel, ({ params }) => {
    sessions.get(params.sessionId)?.cancel();
  })
  .onRequest(
    "_interop/echo",
    (params) => params ?? {},
    ({ params }) => ({ echo: params }),
  );

// tests/interop/ts_ws_server.mjs imports this app and serves it over WebSocket instead.
export { app };

if (import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const connection = app.connect(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
  await connection.closed;
}
