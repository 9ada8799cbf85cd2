// The TypeScript SDK's bench client (@agentclientprotocol/sdk 2.4.0), written as its README teaches
// for a client: `client({ name })`, `onRequest(...)` / `onNotification(...)`, then
// `connectWith(stream, async (ctx) => ...)` with `ndJsonStream` over a spawned agent's stdio.
// (2.4.0 has no ClientSideConnection class any more; this builder is what replaced it.)
//
// Usage: node ts_client.mjs [--agent SCRIPT] [--warmup W] [--repeats R] COMMAND...  (ACP_INTEROP_NPM_DIR
// set; SCRIPT a Node script in this directory, default ts_agent.mjs; commands as in common.py).  Prints the same
// JSON object as the Python clients: {"<command>": [seconds, ...], "cpu": {...}, "agent_hwm_kib": N}.
import { spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { performance } from "node:perf_hooks";
import { Readable, Writable } from "node:stream";
import { fileURLToPath } from "node:url";
import { loadEsm } from "../../tests/interop/load_esm.mjs";
import { createBenchClient } from "./ts_bench.mjs";

const acp = await loadEsm("@agentclientprotocol/sdk");
const HERE = dirname(fileURLToPath(import.meta.url));
const TOOL_EVERY = 10;

const argv = process.argv.slice(2);
const options = { agent: "ts_agent.mjs", warmup: 1, repeats: 3 };
const commands = [];
for (let i = 0; i < argv.length; i++) {
  if (argv[i].startsWith("--")) {
    const name = argv[i].slice(2);
    options[name] = name === "agent" ? argv[++i] : Number(argv[++i]);
  } else {
    commands.push(argv[i]);
  }
}

// CPU seconds of a process: the sum over its threads of /proc/<pid>/task/*/schedstat (ns on the CPU).
function processCpu(pid) {
  let total = 0;
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    total += Number(readFileSync(`/proc/${pid}/task/${task}/schedstat`, "ascii").split(" ")[0]);
  }
  return total / 1e9;
}

function statusKib(pid, field) {
  const line = readFileSync(`/proc/${pid}/status`, "ascii")
    .split("\n")
    .find((l) => l.startsWith(`${field}:`));
  return Number(line.split(/\s+/)[1]);
}

const counts = { updates: 0, reads: 0, permissions: 0 };
const app = createBenchClient(acp, counts);

const script = join(HERE, options.agent);
const child = spawn(process.execPath, [script], { stdio: ["pipe", "pipe", "inherit"] });
const exited = new Promise((resolve) => child.on("exit", resolve));
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));

const results = {};
const cpu = {};
await app.connectWith(stream, async (agent) => {
  await agent.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: true } },
  });
  const session = await agent.request(acp.methods.agent.session.new, { cwd: HERE, mcpServers: [] });
  for (const command of commands) {
    const [kind, nText] = command.split(" ");
    const n = Number(nText);
    const want = kind === "mixed" ? n + 2 * Math.floor(n / TOOL_EVERY) : n;
    for (let k = 0; k < options.warmup + options.repeats; k++) {
      counts.updates = counts.reads = counts.permissions = 0;
      const agentBefore = processCpu(child.pid);
      const clientBefore = process.cpuUsage();
      const start = performance.now();
      const response = await agent.request(acp.methods.agent.session.prompt, {
        sessionId: session.sessionId,
        prompt: [{ type: "text", text: command }],
      });
      const elapsed = (performance.now() - start) / 1000;
      const client = process.cpuUsage(clientBefore);
      const agentCpu = processCpu(child.pid) - agentBefore;
      const got = kind === "stream" || kind === "mixed" ? counts.updates : kind === "read" ? counts.reads : counts.permissions;
      if (response.stopReason !== "end_turn" || got !== want) {
        throw new Error(`${command}: stop reason ${response.stopReason}, ${got} of ${want} handled`);
      }
      if (k >= options.warmup) {
        (results[command] ??= []).push(elapsed);
        const c = (cpu[command] ??= { agent: [], client: [] });
        c.agent.push(agentCpu);
        c.client.push((client.user + client.system) / 1e6);
      }
    }
  }
  results.cpu = cpu;
  results.agent_hwm_kib = statusKib(child.pid, "VmHWM");
});
child.stdin.end();
await exited;
process.stdout.write(JSON.stringify(results) + "\n");
process.exit(0);
