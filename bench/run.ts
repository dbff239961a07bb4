// `npm run bench [-- suite ...]`: runs the benchmark suites, prints one table and writes
// bench/results.json as {"figures": {"<name>": {"value": n, "unit": "ms"}}}.
//
// Each suite is a module `bench/<suite>.ts` exporting `run(ctx)`. Ratios are measured against a
// baseline taken in the same run, because absolute numbers on a shared 2-core machine drift.
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { startEdge, type Edge, type EdgeOptions } from "../scripts/lib/edge.ts";
import { startSqld } from "../scripts/lib/sqld.ts";

/** `spread`: the lowest and highest of the rounds a median was taken over. */
export type Figures = Record<string, { value: number; unit: string; target?: string; spread?: [number, number] }>;

export interface BenchContext {
  /** A fresh sqld for this run, and its pid. */
  libsqlUrl: string;
  sqldPid: number;
  /** A scratch folder removed after the run. */
  dir: string;
  startEdge(opts: Omit<EdgeOptions, "dir"> & { dir?: string }): Promise<Edge>;
}

const SUITES = ["edge", "edge-scale", "gateway", "pool", "runtime", "local", "spawn-floor", "e2e", "ci", "kube", "ops", "obs"];
const here = import.meta.dirname;

const chosen = process.argv.slice(2).filter((a) => !a.startsWith("-"));
const suites = (chosen.length ? chosen : SUITES).filter((s) => existsSync(join(here, `${s}.ts`)));

const dir = mkdtempSync(join(tmpdir(), "sbx-bench-"));
const sqld = await startSqld({ dir: join(dir, "sqld") });
let edges = 0;
const ctx: BenchContext = {
  libsqlUrl: sqld.url,
  sqldPid: sqld.pid,
  dir,
  startEdge: (opts) => startEdge({ ...opts, dir: opts.dir ?? join(dir, `edge-${edges++}`) }),
};

const figures: Figures = {};
const failures: string[] = [];
try {
  for (const suite of suites) {
    const started = Date.now();
    try {
      const mod = (await import(join(here, `${suite}.ts`))) as { run(ctx: BenchContext): Promise<Figures> };
      Object.assign(figures, await mod.run(ctx));
      console.error(`bench ${suite}: ${((Date.now() - started) / 1000).toFixed(1)} s`);
    } catch (err) {
      failures.push(`${suite}: ${(err as Error).stack ?? err}`);
    }
  }
} finally {
  await sqld.stop();
  rmSync(dir, { recursive: true, force: true });
}

const rows = Object.entries(figures).map(([name, f]) => [name, String(Math.round(f.value * 100) / 100) + (f.spread ? ` (${f.spread.join("–")})` : ""), f.unit, f.target ?? ""]);
const widths = [0, 1, 2, 3].map((i) => Math.max(...[["figure", "value", "unit", "target"], ...rows].map((r) => r[i]!.length)));
const line = (r: string[]) => r.map((c, i) => (i === 1 ? c.padStart(widths[i]!) : c.padEnd(widths[i]!))).join("  ");
console.log(line(["figure", "value", "unit", "target"]));
for (const r of rows) console.log(line(r));
writeFileSync(resolve(here, "results.json"), JSON.stringify({ figures }, null, 2) + "\n");
for (const f of failures) console.error(`FAILED ${f}`);
process.exit(failures.length ? 1 : 0);
