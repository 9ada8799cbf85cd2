// A version-2-only agent written with the official TypeScript SDK's v2 entry point
// (@agentclientprotocol/sdk/experimental/v2, SDK 2.4.0, which refuses a v1 client with -32022),
// playing one full turn: text, a plan, a tool call with permission, cancel.
//
// Run by tests/test_interop_adapt.py as `node ts_v2_turn_agent.mjs` (ACP_INTEROP_NPM_DIR set)
// behind `python -m acp_trio.adapt --speak 1`, driven by version-1 clients.  The script
// (docs/protocol/v2/prompt-lifecycle.mdx, agent-plan.mdx, tool-calls.mdx):
//  - initialize: protocol version 2, info ts-sdk-v2-turn-agent, capabilities {session: {}};
//  - session/prompt answers the receipt {messageId} at once; the turn runs after it:
//    user_message (the prompt), state_update running, then
//    - "hello": chunks "Hello", " from", " the TypeScript SDK" (one message); plan_update (planId
//      "plan": "Ask to write output.txt" in_progress, "Write output.txt" pending);
//      tool_call_update turn-write (title "Write output.txt", kind edit, pending, _meta
//      {"interop/mark": "ts"}); requires_action; session/request_permission (subject: that tool
//      call); running; the tool call "completed" with a text content "wrote output.txt" on
//      "allow" ("failed" otherwise); the plan with both entries completed; a chunk
//      "permission: <choice>"; idle end_turn (a session/cancel while it waits for the answer:
//      the chunk, the tool call "cancelled", idle cancelled);
//    - "wait": a chunk "waiting", tool_call_update turn-wait (pending), requires_action and a
//      permission request; session/cancel aborts that request's signal (the SDK sends
//      $/cancel_request; the client MUST answer "cancelled"); a chunk "permission: <answer>",
//      the tool call "cancelled" (v2 only: a v1 client sees "failed"), idle cancelled;
//  - the rest of the v2 baseline that advertising capabilities.session commits it to
//    (migration.mdx § Baseline methods): session/list (its open sessions, cwd filter),
//    session/resume (with replayFrom {type: "start"}: every update of the session sent so far,
//    replayed before the answer; without it, no replay), session/close (cancels a waiting turn,
//    forgets the session).
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
const ASK = "Ask to write output.txt";
const WRITE = "Write output.txt";

const sessions = new Map(); // sessionId -> { cwd, cancel: AbortController | null, history: [update] }
let nextSession = 0;
let nextMessage = 0;

function textOf(prompt) {
  return prompt
    .filter((block) => block.type === "text")
    .map((block) => block.text)
    .join("");
}

// The client's answer to a permission request: the selected option id, or its outcome.
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
  const update = (u) => {
    session.history.push(u);
    return client.notify(acp.methods.client.session.update, { sessionId, update: u });
  };
  const state = (s, extra = {}) => update({ sessionUpdate: "state_update", state: s, ...extra });
  const agentMessageId = `ts-turn-msg-${++nextMessage}`;
  const say = (text) =>
    update({ sessionUpdate: "agent_message_chunk", messageId: agentMessageId, content: { type: "text", text } });
  const tool = (toolCallId, fields) => update({ sessionUpdate: "tool_call_update", toolCallId, ...fields });
  const plan = (ask, write) =>
    update({
      sessionUpdate: "plan_update",
      plan: {
        type: "items",
        planId: "plan",
        entries: [
          { content: ASK, priority: "high", status: ask },
          { content: WRITE, priority: "medium", status: write },
        ],
      },
    });
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

  if (textOf(prompt) === "wait") {
    // Armed before the first await below, so a session/cancel from now on is seen.
    const cancel = new AbortController();
    session.cancel = cancel;
    await say("waiting");
    await tool("turn-wait", { title: WRITE, kind: "edit", status: "pending" });
    await state("requires_action");
    const choice = await choiceOf(ask("turn-wait", { cancellationSignal: cancel.signal }));
    if (!cancel.signal.aborted) {
      await new Promise((resolve) => cancel.signal.addEventListener("abort", resolve));
    }
    session.cancel = null;
    await say(`permission: ${choice}`);
    await tool("turn-wait", { status: "cancelled" });
    await state("idle", { stopReason: "cancelled" });
    return;
  }

  // session/cancel during this turn withdraws its permission request and ends it "cancelled"
  const cancel = new AbortController();
  session.cancel = cancel;
  for (const chunk of ["Hello", " from", " the TypeScript SDK"]) {
    await say(chunk);
  }
  await plan("in_progress", "pending");
  await tool("turn-write", { title: WRITE, kind: "edit", status: "pending", _meta: { "interop/mark": "ts" } });
  await state("requires_action");
  const choice = await choiceOf(ask("turn-write", { cancellationSignal: cancel.signal }));
  session.cancel = null;
  if (cancel.signal.aborted) {
    await say(`permission: ${choice}`);
    await tool("turn-write", { status: "cancelled" });
    await state("idle", { stopReason: "cancelled" });
    return;
  }
  await state("running");
  if (choice === "allow") {
    const content = [{ type: "content", content: { type: "text", text: "wrote output.txt" } }];
    await tool("turn-write", { status: "completed", content });
  } else {
    await tool("turn-write", { status: "failed" });
  }
  await plan("completed", "completed");
  await say(`permission: ${choice}`);
  await state("idle", { stopReason: "end_turn" });
}

const app = acp
  .agent({ name: "ts-sdk-v2-turn-agent" })
  .onRequest(acp.methods.agent.initialize, () => ({
    protocolVersion: acp.PROTOCOL_VERSION,
    info: { name: "ts-sdk-v2-turn-agent", version: "2.4.0" },
    capabilities: { session: {} },
    authMethods: [],
  }))
  .onRequest(acp.methods.agent.session.new, ({ params }) => {
    const sessionId = `ts-turn-${++nextSession}`;
    sessions.set(sessionId, { cwd: params.cwd, cancel: null, history: [] });
    return { sessionId };
  })
  .onRequest(acp.methods.agent.session.list, ({ params }) => ({
    sessions: [...sessions]
      .filter(([, session]) => !params.cwd || session.cwd === params.cwd)
      .map(([sessionId, session]) => ({ sessionId, cwd: session.cwd })),
  }))
  .onRequest(acp.methods.agent.session.resume, async ({ params, client }) => {
    const session = sessions.get(params.sessionId);
    if (!session) {
      throw acp.RequestError.resourceNotFound(params.sessionId);
    }
    session.cwd = params.cwd;
    if (params.replayFrom?.type === "start") {
      for (const update of session.history) {
        await client.notify(acp.methods.client.session.update, { sessionId: params.sessionId, update });
      }
    }
    return {};
  })
  .onRequest(acp.methods.agent.session.close, ({ params }) => {
    const session = sessions.get(params.sessionId);
    if (!session) {
      throw acp.RequestError.resourceNotFound(params.sessionId);
    }
    session.cancel?.abort();
    sessions.delete(params.sessionId);
    return {};
  })
  .onRequest(acp.methods.agent.session.prompt, ({ params, client }) => {
    const { sessionId } = params;
    const session = sessions.get(sessionId);
    if (!session) {
      throw acp.RequestError.resourceNotFound(sessionId);
    }
    const messageId = `ts-turn-user-${++nextMessage}`;
    // The response is the receipt; the turn runs after it (setImmediate: the response goes first).
    setImmediate(() =>
      runTurn(client, sessionId, session, messageId, params.prompt).catch((error) => {
        process.stderr.write(`ts_v2_turn_agent: the turn failed: ${error?.stack ?? error}\n`);
        process.exit(1);
      }),
    );
    return { messageId };
  })
  .onNotification(acp.methods.agent.session.cancel, ({ params }) => {
    sessions.get(params.sessionId)?.cancel?.abort();
  });

const connection = app.connect(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
await connection.closed;
