// An ACP v2 agent written with the official TypeScript SDK's v2 entry point
// (@agentclientprotocol/sdk/experimental/v2, SDK 2.4.0).
//
// Run by tests/test_interop_v2.py as `node ts_v2_agent.mjs` with ACP_INTEROP_NPM_DIR set;
// acp-trio's v2 client drives it over stdio.  It plays the same script as
// tests/interop/trio_v2_agent.py (docs/protocol/v2/prompt-lifecycle.mdx):
//  - initialize: protocol version 2, info ts-sdk-v2-interop-agent, capabilities {session: {}};
//  - session/prompt answers the receipt {messageId} at once and runs the turn after it:
//    user_message (the prompt, same messageId), state_update running, then
//    - for "wait": agent_message_chunk "waiting", tool_call_update interop-wait (pending),
//      state_update requires_action and session/request_permission (subject: that tool call);
//      session/cancel aborts that request's signal (the SDK sends $/cancel_request); the answer
//      is reported in a chunk "permission: <answer>" (the client MUST answer "cancelled"), the
//      tool call set "cancelled", then state_update idle with stop reason "cancelled";
//    - for anything else: chunks "Hello", " from", " the TypeScript SDK" (one message),
//      tool_call_update interop-write (pending), state_update requires_action, a permission
//      request, state_update running, tool_call_update interop-write "completed" on "allow"
//      ("failed" otherwise), a chunk "permission: <choice>", state_update idle "end_turn";
//    - for "abandon": tool_call_update interop-abandon (pending), state_update requires_action
//      and a permission request that the agent itself withdraws ($/cancel_request, through the
//      request's cancellationSignal) when the client calls _interop/abandon {sessionId}; then
//      running, the tool call "cancelled", a chunk "permission: <outcome>" (or "permission:
//      error <code>" when the request was answered with an error), idle "end_turn";
//  - the extension request _interop/echo answers {echo: params}; _interop/missing is not
//    registered, so the SDK answers -32601.
// A turn that fails makes the process exit 1 (the driving test then fails).
import { createRequire } from "node:module";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

async function loadSdkV2() {
  // As tests/interop/load_sdk.mjs, for the package's "./experimental/v2" export.
  const dir = process.env.ACP_INTEROP_NPM_DIR;
  if (!dir) {
    throw new Error("ACP_INTEROP_NPM_DIR is not set (the npm directory holding @agentclientprotocol/sdk)");
  }
  const require = createRequire(join(dir, "package.json"));
  return import(pathToFileURL(require.resolve("@agentclientprotocol/sdk/experimental/v2")).href);
}

const acp = await loadSdkV2();

const OPTIONS = [
  { optionId: "allow", name: "Allow", kind: "allow_once" },
  { optionId: "reject", name: "Reject", kind: "reject_once" },
];

const sessions = new Map(); // sessionId -> { cancel, abandon: AbortController | null }
let nextSession = 0;
let nextMessage = 0;

function textOf(prompt) {
  return prompt
    .filter((block) => block.type === "text")
    .map((block) => block.text)
    .join("");
}

// The client's answer to a permission request: the selected option id, "cancelled", or
// "error <code>" when it answered with an error (reported in a chunk, so the test sees it).
async function choiceOf(request) {
  try {
    const { outcome } = await request;
    return outcome.outcome === "selected" ? outcome.optionId : outcome.outcome;
  } catch (error) {
    if (typeof error?.code === "number") {
      return `error ${error.code}`;
    }
    throw error;
  }
}

async function runTurn(client, sessionId, session, userMessageId, prompt) {
  const update = (u) => client.notify(acp.methods.client.session.update, { sessionId, update: u });
  const state = (s, extra = {}) => update({ sessionUpdate: "state_update", state: s, ...extra });
  const agentMessageId = `ts-msg-${++nextMessage}`;
  const say = (text) =>
    update({ sessionUpdate: "agent_message_chunk", messageId: agentMessageId, content: { type: "text", text } });
  const tool = (toolCallId, fields) => update({ sessionUpdate: "tool_call_update", toolCallId, ...fields });
  const ask = (toolCallId, options) =>
    client.request(
      acp.methods.client.session.requestPermission,
      {
        sessionId,
        title: "Write output.txt?",
        subject: { type: "tool_call", toolCall: { toolCallId } },
        options: OPTIONS,
      },
      options,
    );

  await update({ sessionUpdate: "user_message", messageId: userMessageId, content: prompt });
  await state("running");

  if (textOf(prompt) === "abandon") {
    // The agent itself withdraws its permission request ($/cancel_request, no session/cancel):
    // the client answers it with the "cancelled" outcome (schema/v2 RequestPermissionOutcome).
    const abandon = new AbortController();
    session.abandon = abandon;
    await tool("interop-abandon", { title: "Write output.txt", kind: "edit", status: "pending" });
    await state("requires_action");
    const answer = await choiceOf(ask("interop-abandon", { cancellationSignal: abandon.signal }));
    session.abandon = null;
    await state("running");
    await tool("interop-abandon", { status: "cancelled" });
    await say(`permission: ${answer}`);
    await state("idle", { stopReason: "end_turn" });
    return;
  }

  if (textOf(prompt) === "wait") {
    // Armed before the first await below, so a session/cancel from now on is seen.
    const cancel = new AbortController();
    session.cancel = cancel;
    await say("waiting");
    await tool("interop-wait", { title: "Write output.txt", kind: "edit", status: "pending" });
    await state("requires_action");
    // Aborting the signal (session/cancel) sends $/cancel_request; the promise still settles
    // with the client's answer, which MUST be the "cancelled" outcome (prompt-lifecycle.mdx).
    const choice = await choiceOf(ask("interop-wait", { cancellationSignal: cancel.signal }));
    if (!cancel.signal.aborted) {
      await new Promise((resolve) => cancel.signal.addEventListener("abort", resolve));
    }
    session.cancel = null;
    await say(`permission: ${choice}`);
    await tool("interop-wait", { status: "cancelled" });
    await state("idle", { stopReason: "cancelled" });
    return;
  }

  for (const chunk of ["Hello", " from", " the TypeScript SDK"]) {
    await say(chunk);
  }
  await tool("interop-write", { title: "Write output.txt", kind: "edit", status: "pending" });
  await state("requires_action");
  const choice = await choiceOf(ask("interop-write"));
  await state("running");
  await tool("interop-write", { status: choice === "allow" ? "completed" : "failed" });
  await say(`permission: ${choice}`);
  await state("idle", { stopReason: "end_turn" });
}

const app = acp
  .agent({ name: "ts-sdk-v2-interop-agent" })
  .onRequest(acp.methods.agent.initialize, () => ({
    protocolVersion: acp.PROTOCOL_VERSION,
    info: { name: "ts-sdk-v2-interop-agent", version: "2.4.0" },
    capabilities: { session: {} },
    authMethods: [],
  }))
  .onRequest(acp.methods.agent.session.new, () => {
    const sessionId = `ts-session-${++nextSession}`;
    sessions.set(sessionId, { cancel: null, abandon: null });
    return { sessionId };
  })
  .onRequest(acp.methods.agent.session.prompt, ({ params, client }) => {
    const { sessionId } = params;
    const session = sessions.get(sessionId);
    if (!session) {
      throw acp.RequestError.resourceNotFound(sessionId);
    }
    const messageId = `ts-user-${++nextMessage}`;
    // The response is the receipt; the turn runs after it (setImmediate: the response goes first).
    setImmediate(() =>
      runTurn(client, sessionId, session, messageId, params.prompt).catch((error) => {
        process.stderr.write(`ts_v2_agent: the turn failed: ${error?.stack ?? error}\n`);
        process.exit(1);
      }),
    );
    return { messageId };
  })
  .onNotification(acp.methods.agent.session.cancel, ({ params }) => {
    sessions.get(params.sessionId)?.cancel?.abort();
  })
  .onRequest(
    "_interop/abandon",
    (params) => params ?? {},
    ({ params }) => {
      const session = sessions.get(params.sessionId);
      const pending = Boolean(session?.abandon);
      session?.abandon?.abort();
      return { abandoned: pending };
    },
  )
  .onRequest(
    "_interop/echo",
    (params) => params ?? {},
    ({ params }) => ({ echo: params }),
  );

const connection = app.connect(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
await connection.closed;
