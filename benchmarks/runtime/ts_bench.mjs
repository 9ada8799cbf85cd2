// The TypeScript SDK's bench agent and client apps (@agentclientprotocol/sdk 2.4.0), written as its
// README teaches: `agent({ name })` / `client({ name })` with `onRequest(...)` / `onNotification(...)`.
// The agent serves the commands of
// common.py: "stream N" (N agent_message_chunk updates), "mixed N" (the same with a tool_call and a
// tool_call_update after every 10 chunks), "read N C" (N fs/read_text_file requests to the client,
// C in flight, each answer checked) and "permission N" (N session/request_permission, one at a
// time, "allow" expected); then it ends the turn.  The client counts the updates it gets and answers
// every fs/read_text_file (FILE_CONTENT) and session/request_permission ("allow").  Shared by the
// stdio scripts (ts_agent.mjs, ts_client.mjs) and the remote ones (../remote/ts_server.mjs, one
// agent per connection, and ../remote/ts_client.mjs).
//
// `createBenchAgent(acp)`: the agent app, for the SDK module `acp`.
// `createBenchClient(acp, counts)`: the client app; it counts into `counts` ({updates, reads, permissions}).

const SESSION_ID = "sess_bench_0001";
const FILE_CONTENT = "def hello():\n    return 'world'\n";
const TOOL_EVERY = 10;
const OPTIONS = [
  { optionId: "allow", name: "Allow", kind: "allow_once" },
  { optionId: "reject", name: "Reject", kind: "reject_once" },
];
const chunkText = (i) => `token ${i} of the streamed answer `;
const filePath = (i) => `/bench/src/module_${i % 97}.py`;
const toolCallId = (i) => `call_${i}`;
const toolTitle = (i) => `Read module_${i % 97}.py`;

export function createBenchAgent(acp) {
  async function stream(client, sessionId, n, mixed) {
    const update = (u) => client.notify(acp.methods.client.session.update, { sessionId, update: u });
    for (let i = 0; i < n; i++) {
      await update({ sessionUpdate: "agent_message_chunk", content: { type: "text", text: chunkText(i) } });
      if (mixed && i % TOOL_EVERY === TOOL_EVERY - 1) {
        await update({ sessionUpdate: "tool_call", toolCallId: toolCallId(i), title: toolTitle(i), kind: "read", status: "pending" });
        await update({ sessionUpdate: "tool_call_update", toolCallId: toolCallId(i), status: "completed" });
      }
    }
  }

  async function permission(client, sessionId, n) {
    for (let i = 0; i < n; i++) {
      const response = await client.request(acp.methods.client.session.requestPermission, {
        sessionId,
        toolCall: { toolCallId: toolCallId(i), title: toolTitle(i), kind: "edit" },
        options: OPTIONS,
      });
      if (response.outcome.outcome !== "selected" || response.outcome.optionId !== "allow") {
        throw new Error(`permission ${i}: unexpected outcome ${JSON.stringify(response.outcome)}`);
      }
    }
  }

  async function read(client, sessionId, n, width) {
    let next = 0; // shared by the workers: `width` requests in flight
    const worker = async () => {
      while (next < n) {
        const i = next++;
        const response = await client.request(acp.methods.client.fs.readTextFile, { sessionId, path: filePath(i) });
        if (response.content !== FILE_CONTENT) {
          throw new Error(`read ${i}: unexpected content ${response.content}`);
        }
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, width) }, worker));
  }

  return acp
    .agent({ name: "bench-ts-agent" })
    .onRequest(acp.methods.agent.initialize, () => ({
      protocolVersion: acp.PROTOCOL_VERSION,
      agentCapabilities: {},
      authMethods: [],
    }))
    .onRequest(acp.methods.agent.session.new, () => ({ sessionId: SESSION_ID }))
    .onRequest(acp.methods.agent.session.prompt, async ({ params, client }) => {
      const [kind, n, width] = params.prompt[0].text.split(" ");
      if (kind === "stream" || kind === "mixed") {
        await stream(client, params.sessionId, Number(n), kind === "mixed");
      } else if (kind === "permission") {
        await permission(client, params.sessionId, Number(n));
      } else if (kind === "read") {
        await read(client, params.sessionId, Number(n), Number(width));
      } else {
        throw new Error(`unknown bench command ${params.prompt[0].text}`);
      }
      return { stopReason: "end_turn" };
    });
}

export function createBenchClient(acp, counts) {
  return acp
    .client({ name: "bench-ts-client" })
    .onNotification(acp.methods.client.session.update, () => {
      counts.updates += 1;
    })
    .onRequest(acp.methods.client.fs.readTextFile, () => {
      counts.reads += 1;
      return { content: FILE_CONTENT };
    })
    .onRequest(acp.methods.client.session.requestPermission, () => {
      counts.permissions += 1;
      return { outcome: { outcome: "selected", optionId: "allow" } };
    });
}
