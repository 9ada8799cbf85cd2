// The TypeScript SDK's Streamable HTTP client (createHttpStream, @agentclientprotocol/sdk 2.4.0)
// meeting a 409 from our server (tests/test_transport_http_server.py), and reattaching.
//
// Usage: node ts_http_reattach.mjs http://HOST:PORT/acp   (ACP_INTEROP_NPM_DIR set)
// initialize, session/new; the agent has taken the new session's SSE stream itself, so the
// client's GET gets 409 and the SDK fails that session: a prompt in it fails (-32603).  The
// extension request _test/release makes the agent let the stream go; session/load then reattaches
// the session (tried again while the server has not seen the old reader leave yet), and a prompt
// streams its updates.  Prints a JSON summary on stdout, or exits non-zero.
import { loadEsm } from "./load_esm.mjs";
import { loadSdk } from "./load_sdk.mjs";

const acp = await loadSdk();
const { createHttpStream } = await loadEsm("@agentclientprotocol/sdk/experimental/http-client");
const url = process.argv[2];
const summary = { updates: [], loadAttempts: 0 };

const app = acp.client({ name: "ts-sdk-reattach-client" }).onNotification(acp.methods.client.session.update, ({ params }) => {
  summary.updates.push(params.update.content?.text);
});

async function errorOf(promise) {
  try {
    return { result: await promise };
  } catch (error) {
    return { error: { code: error.code, message: error.message } };
  }
}

await app.connectWith(createHttpStream(url, {}), async (agent) => {
  await agent.request(acp.methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} });
  const { sessionId } = await agent.request(acp.methods.agent.session.new, { cwd: "/", mcpServers: [] });
  const prompt = () => agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "hi" }] });
  summary.failed = await errorOf(prompt());
  await agent.request("_test/release", {});
  for (;;) {
    summary.loadAttempts += 1;
    const loaded = await errorOf(agent.request(acp.methods.agent.session.load, { sessionId, cwd: "/", mcpServers: [] }));
    if (loaded.result !== undefined) {
      summary.loaded = loaded.result;
      break;
    }
    if (summary.loadAttempts >= 50) {
      throw new Error(`session/load kept failing: ${JSON.stringify(loaded)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  summary.prompt = await prompt();
});
process.stdout.write(JSON.stringify(summary) + "\n");
