// Where a code-interpreter cell's host CPU goes (issue 12): the agent's and workerd's CPU time per
// cell (utime+stime of the processes, /proc), which on a shared machine is what a cell waits for
// (a process with c ms of work waits about c × load / cores for it), unlike wall times that follow
// the other tenants' load. Cells: runCode('pass') through the SDK, the same /execute signed and
// sent straight to the agent's ingress, and GET /health through the ingress (the HTTP floor).
//   node bench/ci-cpu.ts    prints the figures as JSON (needs the root lock and the code-interpreter
//                           rootfs as bench/ci.ts; SBX_AGENT_NODE_ARGS=--cpu-prof profiles the agent)
import { Sandbox } from "@e2b/code-interpreter";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startSystem } from "../scripts/lib/system.ts";
import { ingressKey, signIngress, SIGNATURE_HEADER } from "../schema/ingress/signature.ts";
import type { Figures } from "./run.ts";
import { median, round } from "./stats.ts";

const CELLS = Number(process.env.CI_BENCH_CELLS ?? 150);
const TICK_MS = 1000 / 100; // USER_HZ
const IDLE_MS = 5_000;

/** utime+stime (ms) of a process and its threads. */
function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(f[11]) + Number(f[12])) * TICK_MS;
}

/** The pids of processes whose command line contains `needle`. */
function pidsOf(needle: string): number[] {
  const out: number[] = [];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      if (readFileSync(`/proc/${d}/cmdline`, "utf8").includes(needle)) out.push(Number(d));
    } catch {}
  }
  return out;
}

export async function run(): Promise<Figures> {
  const dataDir = mkdtempSync(join(tmpdir(), "sbx-bench-cicpu-"));
  const sys = await startSystem({ dataDir, baseReplicas: 0, codeInterpreterReplicas: 1 });
  const figures: Figures = {};
  try {
    const sbx = await Sandbox.create({ apiKey: sys.apiKey, apiUrl: sys.apiUrl, sandboxUrl: sys.apiUrl });
    const key = await ingressKey(sys.secrets.clusterToken);
    const ingress = async (method: string, path: string, body?: string) => {
      const target = { sandboxId: sbx.sandboxId, port: 49999, method, pathAndQuery: path };
      const res = await fetch(`http://127.0.0.1:${sys.secrets.ingressPort}${path}`, {
        method,
        headers: { "content-type": "application/json", "e2b-sandbox-id": sbx.sandboxId, "e2b-sandbox-port": "49999", [SIGNATURE_HEADER]: await signIngress(key, target, Date.now()) },
        body,
      });
      return res.text();
    };
    const kinds: Record<string, () => Promise<unknown>> = {
      sdk: () => sbx.runCode("pass"),
      ingress: () => ingress("POST", "/execute", JSON.stringify({ code: "pass" })),
      health: () => ingress("GET", "/health"),
    };
    for (let i = 0; i < 20; i++) for (const f of Object.values(kinds)) await f();
    const agent = sys.agent.pid!;
    const workerd = pidsOf(dataDir).filter((p) => readFileSync(`/proc/${p}/cmdline`, "utf8").includes("workerd"));
    const workerdMs = () => workerd.reduce((s, p) => s + cpuMs(p), 0);
    // What the processes spend with no request (timers, the agent link, probes): per ms of wall
    // time, taken off each kind's figure for the time it ran.
    const idleT = performance.now();
    const [a0, w0] = [cpuMs(agent), workerdMs()];
    await new Promise((r) => setTimeout(r, IDLE_MS));
    const idleWall = performance.now() - idleT;
    const idleAgent = (cpuMs(agent) - a0) / idleWall;
    const idleWorkerd = (workerdMs() - w0) / idleWall;
    figures["ci.idle_agent_cpu_per_s_ms"] = { value: round(idleAgent * 1000), unit: "ms" };
    for (const [name, f] of Object.entries(kinds)) {
      const [a1, w1, t1] = [cpuMs(agent), workerdMs(), performance.now()];
      const walls: number[] = [];
      for (let i = 0; i < CELLS; i++) {
        const t = performance.now();
        await f();
        walls.push(performance.now() - t);
      }
      const wall = performance.now() - t1;
      figures[`ci.${name}_agent_cpu_ms`] = { value: round((cpuMs(agent) - a1 - idleAgent * wall) / CELLS), unit: "ms" };
      figures[`ci.${name}_workerd_cpu_ms`] = { value: round((workerdMs() - w1 - idleWorkerd * wall) / CELLS), unit: "ms" };
      figures[`ci.${name}_wall_p50_ms`] = { value: round(median(walls)), unit: "ms" };
    }
    await sbx.kill();
  } finally {
    await sys.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
  return figures;
}

if (import.meta.main) console.log(JSON.stringify(await run(), null, 2));
