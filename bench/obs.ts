// `npm run bench -- obs`: issue 15's two figures, each from its own script (run as a child, as a
// user would run it, so its processes and collector come and go with it):
// - obs.metrics_scrape_ms: one scrape of the agent's /metrics with 10,000 sandboxes (median wall
//   time; bench/metrics-scrape.ts), and the process's CPU per scrape beside it.
// - obs.tracing_overhead_ratio: the edge's creates/s with tracing to a real collector over without,
//   interleaved rounds (bench/edge-ab.ts --tracing: the rounds' orders a balanced design, each
//   window after the system settled, timed in its steady state of whole export periods), with the
//   system-CPU ratio and workerd's CPU per create (traced over untraced: what other processes' load
//   disturbs least) beside it. Each window is read against the untraced copies' windows of its own
//   round, A and A′ (--control), and obs.tracing_null_ratio is A′ over A, which a fair run puts at
//   1.00 within its interval: a tracing figure is worth what the null one's distance from 1.00 and
//   its interval allow.
// Both report the load average: the machine is shared.
import { execFileSync } from "node:child_process";
import { loadavg } from "node:os";
import { join } from "node:path";
import type { Figures } from "./run.ts";

const here = import.meta.dirname;
const ROUNDS = 24; // four blocks of edge-ab's balanced design for three sides

function runScript(script: string, args: string[]): string {
  return execFileSync(process.execPath, [join(here, script), ...args], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"], maxBuffer: 64 << 20 });
}

/** `<name> <value> (... spread a..b ...)` from a script's output line. */
function figure(out: string, name: string): { value: number; spread?: [number, number] } {
  const line = out.split("\n").find((l) => l.startsWith(`${name} `));
  if (!line) throw new Error(`no ${name} in:\n${out}`);
  const value = Number(line.split(" ")[1]);
  const s = /spread ([\d.]+)\.\.([\d.]+)/.exec(line) ?? /min ([\d.]+), max ([\d.]+)/.exec(line);
  return s ? { value, spread: [Number(s[1]), Number(s[2])] } : { value };
}

export async function run(): Promise<Figures> {
  const load = () => loadavg()[0]!.toFixed(1);
  const scrape = runScript("metrics-scrape.ts", ["--sandboxes", "10000", "--scrapes", "30"]);
  const scrapeLoad = load();
  const cpu = figure(scrape.replace("process CPU ms per scrape", "process_cpu_ms_per_scrape"), "process_cpu_ms_per_scrape");
  // 1500 creates: about 4 s a window, 3 of them steady (past the first second's export).
  const tracing = runScript("edge-ab.ts", ["--tracing", "--control", "--rounds", String(ROUNDS), "--creates", "1500"]);
  // The run's rounds, on stderr beside the table: a figure is read with its null ratio and spread.
  process.stderr.write(tracing);
  // The 1-minute load before the rounds and after them (edge-ab prints both).
  const loads = /^load average ([\d.]+) .*\(before the rounds: ([\d.]+)/m.exec(tracing);
  const tracingLoad = loads ? `${loads[2]} before, ${loads[1]} after` : load();
  const system = /system CPU per create \(creates per CPU-second, B\/\w+\) [\d. ]+\(median ([\d.]+), spread ([\d.]+)\.\.([\d.]+)[,)]/.exec(tracing);
  const out: Figures = {
    "obs.metrics_scrape_ms": { ...figure(scrape, "obs.metrics_scrape_ms"), unit: `ms (10,000 sandboxes, median of 30; load ${scrapeLoad})`, target: "report" },
    "obs.metrics_scrape_cpu_ms": { ...cpu, unit: `ms CPU per scrape (load ${scrapeLoad})`, target: "report" },
    "obs.tracing_overhead_ratio": { ...figure(tracing, "obs.tracing_overhead_ratio"), unit: `creates/s traced / both untraced copies (${ROUNDS} rounds, balanced order; load ${tracingLoad})`, target: ">= 0.95" },
    "obs.tracing_null_ratio": { ...figure(tracing, "obs.tracing_null_ratio"), unit: `creates/s untraced / untraced, the same run's control (load ${tracingLoad})`, target: "report" },
  };
  const workerd = /^per round B\/\w+ workerd CPU per create [\d. ]+\(median ([\d.]+), spread ([\d.]+)\.\.([\d.]+)[,)]/m.exec(tracing);
  if (workerd) out["obs.tracing_workerd_cpu_ratio"] = { value: Number(workerd[1]), spread: [Number(workerd[2]), Number(workerd[3])], unit: `workerd CPU per create, traced / untraced (load ${tracingLoad})` };
  if (system) out["obs.tracing_system_cpu_ratio"] = { value: Number(system[1]), spread: [Number(system[2]), Number(system[3])], unit: `creates per CPU-second of the system's processes, traced / untraced (load ${tracingLoad})` };
  return out;
}
