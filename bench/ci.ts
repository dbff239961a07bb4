// Code-interpreter figures (issue 12) with the real @e2b/code-interpreter SDK against the system
// `npm start` runs, from a warm `code-interpreter-v1` pool:
//   ci.first_result_ms        Sandbox.create + the first runCode('1+1') result (the default
//                             context's kernel starts on that first cell), median of CREATES
//   ci.cell_overhead_ratio    median runCode('pass') through the SDK (edge gateway, agent ingress,
//                             runtime, kernel driver, kernel) over the same cell sent straight to a
//                             kernel with jupyter_client inside the same sandbox, the two interleaved
//                             cell by cell; taken in ROUNDS rounds of CELLS cells, the figure is the
//                             median of the rounds' ratios, its spread their lowest and highest
//                             (target ≤ 1.5)
//   ci.cell_overhead_vs_driver_ratio
//                             the same over the stricter floor: the cell through our own kernel
//                             driver's line protocol inside the sandbox (no HTTP, no jupyter_client
//                             client; the driver talks ZeroMQ to the kernel itself), per round
//   ci.cell_sdk_p50_ms / ci.cell_ingress_p50_ms / ci.cell_driver_p50_ms / ci.cell_kernel_p50_ms
//                             the parts: the SDK's cell; the same request signed and sent straight
//                             to the agent's ingress (no edge gateway); the cell through our kernel
//                             driver's own line protocol (a pipe, no HTTP) and on the bare kernel,
//                             both timed inside the sandbox; so the profile says which hop costs what
//   ci.health_ingress_p50_ms  GET /health of the interpreter through the ingress: the HTTP hop's floor
// With --cpu (`npm run bench -- ci --cpu`, `node bench/ci.ts --cpu`), instead of those: where a
// cell's host CPU goes, which on a shared machine is what a cell waits for (a process with c ms of
// work waits about c × load / cores for it), unlike wall times that follow the other tenants' load.
// Per cell, in ROUNDS rounds of CPU_CELLS cells of each kind in turn (median of the rounds, their
// spread), with what the processes spend with no request (timers, the agent link, probes) taken off:
//   ci.<kind>_agent_cpu_ms    the agent (its ingress and the embedded runtime)
//   ci.<kind>_workerd_cpu_ms  the edge (workerd: the gateway)
//   ci.<kind>_driver_cpu_ms   the kernel driver inside the sandbox (Python, jupyter_client)
//   ci.<kind>_kernel_cpu_ms   its kernel (ipykernel)
//   ci.<kind>_client_cpu_ms   this process: the SDK (or the plain fetch) that sends the cell
//   ci.<kind>_wall_p50_ms
// for kind `sdk` (runCode('pass') through the SDK), `ingress` (the same /execute signed and sent
// straight to the agent's ingress) and `health` (GET /health through the ingress: the HTTP floor).
// SBX_AGENT_NODE_ARGS=--cpu-prof profiles the agent, CI_BENCH_EDGE_PROFILE=<file> records a V8
// profile of workerd over the rounds (open either in Chrome DevTools).
//   node bench/ci.ts [--cpu]   prints the figures as JSON
// Needs the code-interpreter root filesystem (`node controllers/drivers/local/rootfs/cli.ts
// build-code-interpreter`, which `.ci/run` and the test tiers' setup build).
import { Sandbox } from "@e2b/code-interpreter";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { PassThrough } from "node:stream";
import { KERNEL_DRIVER_PY } from "../controllers/runtime/interpreter/kernel-driver-source.ts";
import { RootfsStore } from "../controllers/drivers/local/rootfs/store.ts";
import { startSystem } from "../scripts/lib/system.ts";
import { freePort } from "../scripts/lib/sqld.ts";
import { startProfiler } from "./v8-profile.ts";
import { ingressKey, signIngress, SIGNATURE_HEADER } from "../schema/ingress/signature.ts";
import { clusterTokenFor } from "../schema/protocol/cluster-token.ts";
import type { Figures } from "./run.ts";
import { cpuMs, median, minMax, procCpuMs, processTree, round } from "./stats.ts";

const CREATES = Number(process.env.CI_BENCH_CREATES ?? 5);
const ROUNDS = Number(process.env.CI_BENCH_ROUNDS ?? 5);
const CELLS = Number(process.env.CI_BENCH_CELLS ?? 60);
/** --cpu: cells of each kind a round, and how long the processes are watched idle. */
const CPU_CELLS = Number(process.env.CI_BENCH_CPU_CELLS ?? 100);
const IDLE_MS = 5_000;
const EDGE_PROFILE = process.env.CI_BENCH_EDGE_PROFILE;

// Inside the sandbox, one line per "go" on stdin: the same `pass` cell timed (a) on a kernel of its
// own through jupyter_client, executed until the kernel reports idle, as our driver does, and (b)
// through our kernel driver (the Python one the runtime runs, started as a child with its line
// protocol on a pipe), until the driver says the cell is done.
const HARNESS = String.raw`
import json, subprocess, sys, time
from jupyter_client.manager import KernelManager
km = KernelManager(kernel_name="python3"); km.start_kernel(); kc = km.client(); kc.start_channels(); kc.wait_for_ready(timeout=120)
def kernel_pass():
    mid = kc.execute("pass")
    while True:
        m = kc.get_iopub_msg(timeout=30)
        if m["parent_header"].get("msg_id") == mid and m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            return
drv = subprocess.Popen([sys.executable, "/tmp/e2b-bench-driver.py", "python3"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
assert json.loads(drv.stdout.readline()).get("ready")
n = 0
def driver_pass():
    global n
    n += 1
    drv.stdin.write(json.dumps({"op": "execute", "id": n, "code": "pass", "env": {}}) + "\n"); drv.stdin.flush()
    while True:
        m = json.loads(drv.stdout.readline())
        if m.get("id") == n and m.get("done"):
            return
print("ready", flush=True)
for _ in sys.stdin:
    t = time.perf_counter(); kernel_pass(); k = time.perf_counter() - t
    t = time.perf_counter(); driver_pass(); d = time.perf_counter() - t
    print(json.dumps({"kernel": k * 1000, "driver": d * 1000}), flush=True)
`;

async function waitPoolWarm(apiUrl: string, apiKey: string, template: string, want: number): Promise<void> {
  const deadline = Date.now() + 600_000;
  while (Date.now() < deadline) {
    const res = await fetch(`${apiUrl}/admin/teams/admin/templates/${template}`, { headers: { "x-api-key": apiKey } });
    if (res.ok && (((await res.json()) as { pool?: { available?: number } }).pool?.available ?? 0) >= want) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`pool ${template} did not reach ${want} available members`);
}

type System = Awaited<ReturnType<typeof startSystem>>;

/** The interpreter's /execute of `pass` and its /health, each signed as the edge signs it and sent
 * straight to the agent's ingress (no edge gateway), with the sandbox's access token as the SDK
 * sends it: /execute runs a cell only with it (envd's 401 otherwise, since 91c02edb). The token is
 * the one `GET /sandboxes/{id}` hands its owner. */
async function ingressCalls(sys: System, sandboxId: string) {
  const key = await ingressKey(await clusterTokenFor(sys.secrets.clusterToken, "local"));
  const detail = await fetch(`${sys.apiUrl}/sandboxes/${sandboxId}`, { headers: { "x-api-key": sys.apiKey } });
  if (!detail.ok) throw new Error(`GET /sandboxes/${sandboxId}: ${detail.status} ${await detail.text()}`);
  const { envdAccessToken } = (await detail.json()) as { envdAccessToken?: string };
  if (!envdAccessToken) throw new Error(`GET /sandboxes/${sandboxId} gave no envdAccessToken`);
  const call = async (method: string, path: string, body?: string) => {
    const target = { sandboxId, port: 49999, method, pathAndQuery: path };
    const res = await fetch(`http://127.0.0.1:${sys.secrets.ingressPort}${path}`, {
      method,
      headers: { "content-type": "application/json", "e2b-sandbox-id": sandboxId, "e2b-sandbox-port": "49999", "x-access-token": envdAccessToken, [SIGNATURE_HEADER]: await signIngress(key, target, Date.now()) },
      body,
    });
    return { status: res.status, text: await res.text() };
  };
  const body = JSON.stringify({ code: "pass" });
  return {
    async execute() {
      const r = await call("POST", "/execute", body);
      if (!r.text.includes("end_of_execution")) throw new Error(`ingress /execute: ${r.status} ${r.text.slice(0, 200)}`);
    },
    async health() {
      const r = await call("GET", "/health");
      if (r.text !== "OK") throw new Error(`ingress /health: ${r.status}`);
    },
  };
}

export async function run(): Promise<Figures> {
  if (!new RootfsStore().templateTrees("code-interpreter")) throw new Error("the code-interpreter root filesystem is not built (cli.ts build-code-interpreter)");
  const cpu = process.argv.includes("--cpu");
  const dataDir = mkdtempSync(join(tmpdir(), "sbx-bench-ci-"));
  const warm = cpu ? 1 : CREATES;
  const inspectorPort = cpu && EDGE_PROFILE ? await freePort() : undefined;
  const sys = await startSystem({ dataDir, baseReplicas: 0, codeInterpreterReplicas: warm, edgeInspectorPort: inspectorPort });
  const opts = { apiKey: sys.apiKey, apiUrl: sys.apiUrl, sandboxUrl: sys.apiUrl };
  const figures: Figures = {};
  try {
    await waitPoolWarm(sys.apiUrl, sys.apiKey, "code-interpreter-v1", warm);
    if (!cpu) Object.assign(figures, await firstResults(opts));
    const sbx = await Sandbox.create(opts);
    try {
      const ingress = await ingressCalls(sys, sbx.sandboxId);
      Object.assign(figures, cpu ? await cpuFigures(sys, sbx, ingress, inspectorPort) : await cellFigures(sbx, ingress));
    } finally {
      await sbx.kill();
    }
  } finally {
    await sys.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
  return figures;
}

/** Create from the warm pool + the first runCode('1+1') result, CREATES times. */
async function firstResults(opts: { apiKey: string; apiUrl: string; sandboxUrl: string }): Promise<Figures> {
  const firsts: number[] = [];
  for (let i = 0; i < CREATES; i++) {
    const t = performance.now();
    const sbx = await Sandbox.create(opts);
    const exec = await sbx.runCode("1+1");
    firsts.push(performance.now() - t);
    if (exec.text !== "2") throw new Error(`runCode('1+1') answered ${JSON.stringify(exec.text)}`);
    await sbx.kill();
  }
  return { "ci.first_result_ms": { value: round(median(firsts)), unit: "ms", spread: minMax(firsts) } };
}

/** The cell through the SDK against the same cell on a bare kernel in the sandbox, and the parts. */
async function cellFigures(sbx: Sandbox, ingress: Awaited<ReturnType<typeof ingressCalls>>): Promise<Figures> {
  await sbx.files.write("/tmp/e2b-bench-driver.py", KERNEL_DRIVER_PY);
  await sbx.files.write("/tmp/e2b-bench-harness.py", HARNESS);
  const out = new PassThrough();
  const handle = await sbx.commands.run("python3 /tmp/e2b-bench-harness.py", { background: true, stdin: true, onStdout: (d) => void out.write(d), timeoutMs: 0 });
  const lines = createInterface({ input: out })[Symbol.asyncIterator]();
  const next = async () => (await lines.next()).value as string;
  if ((await next()) !== "ready") throw new Error("the in-sandbox harness did not start");
  const inside = async () => {
    await handle.sendStdin("go\n");
    return JSON.parse(await next()) as { kernel: number; driver: number };
  };
  // Warm every path (the SDK's default context starts here).
  for (let i = 0; i < 10; i++) await Promise.all([sbx.runCode("pass"), inside(), ingress.execute()]);
  const viaIngress: number[] = [];
  const health: number[] = [];
  const viaSdk: number[] = [];
  const kernel: number[] = [];
  const driver: number[] = [];
  const ratios: number[] = [];
  const driverRatios: number[] = [];
  const timed = async (xs: number[], f: () => Promise<unknown>) => {
    const t = performance.now();
    await f();
    xs.push(performance.now() - t);
  };
  for (let r = 0; r < ROUNDS; r++) {
    const roundSdk: number[] = [];
    const roundKernel: number[] = [];
    const roundDriver: number[] = [];
    for (let i = 0; i < CELLS; i++) {
      await timed(roundSdk, async () => {
        const exec = await sbx.runCode("pass");
        if (exec.error) throw new Error(`runCode('pass'): ${exec.error.name}`);
      });
      await timed(viaIngress, ingress.execute);
      await timed(health, ingress.health);
      const k = await inside();
      roundKernel.push(k.kernel);
      roundDriver.push(k.driver);
    }
    ratios.push(median(roundSdk) / median(roundKernel));
    driverRatios.push(median(roundSdk) / median(roundDriver));
    driver.push(...roundDriver);
    viaSdk.push(...roundSdk);
    kernel.push(...roundKernel);
  }
  await handle.kill();
  return {
    "ci.cell_sdk_p50_ms": { value: round(median(viaSdk)), unit: "ms" },
    "ci.cell_ingress_p50_ms": { value: round(median(viaIngress)), unit: "ms" },
    "ci.health_ingress_p50_ms": { value: round(median(health)), unit: "ms" },
    "ci.cell_driver_p50_ms": { value: round(median(driver)), unit: "ms" },
    "ci.cell_kernel_p50_ms": { value: round(median(kernel)), unit: "ms" },
    "ci.cell_overhead_ratio": { value: round(median(ratios)), unit: "ratio", target: "≤ 1.5", spread: minMax(ratios) },
    "ci.cell_overhead_vs_driver_ratio": { value: round(median(driverRatios)), unit: "ratio", target: "≤ 1.5", spread: minMax(driverRatios) },
  };
}

/** utime+stime (ms) summed over `pids`; a process gone meanwhile counts 0. */
const cpuOf = (pids: number[]) => pids.reduce((s, p) => s + procCpuMs(p).own, 0);

/** Host CPU per cell of each kind, by process (see the header). */
async function cpuFigures(sys: System, sbx: Sandbox, ingress: Awaited<ReturnType<typeof ingressCalls>>, inspectorPort: number | undefined): Promise<Figures> {
  const kinds: Record<string, () => Promise<unknown>> = { sdk: () => sbx.runCode("pass"), ingress: ingress.execute, health: ingress.health };
  for (let i = 0; i < 20; i++) for (const f of Object.values(kinds)) await f();
  const agent = sys.agent.pid!;
  // The kernel driver and its kernel are the agent's descendants (through the spawner), started by
  // the warm-up's first cell at the latest.
  const cmdline = (pid: number) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, "utf8");
    } catch {
      return "";
    }
  };
  const sandbox = processTree(agent).filter((p) => p !== agent);
  const kernel = sandbox.filter((p) => cmdline(p).includes("ipykernel"));
  const driver = sandbox.filter((p) => cmdline(p).includes("The code interpreter's kernel driver"));
  if (!kernel.length || !driver.length) throw new Error("the sandbox's kernel driver and kernel were not found");
  const workerd = sys.edge.pid;
  const parts = { agent: () => cpuMs(agent), workerd: () => cpuMs(workerd), driver: () => cpuOf(driver), kernel: () => cpuOf(kernel), client: () => cpuMs(process.pid) };
  const take = () => Object.fromEntries(Object.entries(parts).map(([k, f]) => [k, f()])) as Record<keyof typeof parts, number>;
  // What the processes spend with no request, per ms of wall time, taken off each round.
  const t0 = performance.now();
  const idle0 = take();
  await new Promise((r) => setTimeout(r, IDLE_MS));
  const idleWall = performance.now() - t0;
  const idle1 = take();
  const idle = Object.fromEntries(Object.keys(parts).map((k) => [k, (idle1[k as keyof typeof parts] - idle0[k as keyof typeof parts]) / idleWall]));
  const profiler = inspectorPort ? await startProfiler(inspectorPort) : undefined;
  const perCell: Record<string, number[]> = {};
  const walls: Record<string, number[]> = {};
  for (let r = 0; r < ROUNDS; r++) {
    for (const [kind, f] of Object.entries(kinds)) {
      const before = take();
      const t1 = performance.now();
      for (let i = 0; i < CPU_CELLS; i++) {
        const t = performance.now();
        await f();
        (walls[kind] ??= []).push(performance.now() - t);
      }
      const wall = performance.now() - t1;
      const after = take();
      for (const part of Object.keys(parts) as (keyof typeof parts)[]) {
        (perCell[`${kind}_${part}`] ??= []).push((after[part] - before[part] - idle[part]! * wall) / CPU_CELLS);
      }
    }
  }
  if (profiler && EDGE_PROFILE) writeFileSync(EDGE_PROFILE, JSON.stringify(await profiler.stop()));
  const figures: Figures = { "ci.idle_agent_cpu_per_s_ms": { value: round(idle.agent! * 1000), unit: "ms" } };
  for (const [name, xs] of Object.entries(perCell)) figures[`ci.${name}_cpu_ms`] = { value: round(median(xs)), unit: "ms", spread: minMax(xs) };
  for (const [kind, xs] of Object.entries(walls)) figures[`ci.${kind}_wall_p50_ms`] = { value: round(median(xs)), unit: "ms" };
  return figures;
}

if (import.meta.main) console.log(JSON.stringify(await run(), null, 2));
