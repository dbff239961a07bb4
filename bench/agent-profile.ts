// The agent's and the spawner's V8 profiles (`node --cpu-prof`) cut by the steps of a
// bench/e2e-steps.ts run, and ranked by self time per step:
//   SBX_AGENT_NODE_ARGS="--cpu-prof --cpu-prof-dir=D" SBX_SPAWNER_NODE_ARGS="--cpu-prof --cpu-prof-dir=D" \
//     E2E_STEPS_LEVEL=bwrap+cgroup E2E_STEPS_MARKS=D/marks.json node bench/e2e-steps.ts
//   node bench/agent-profile.ts D [top]
// For each profile in D (the agent's: the one that ran controllers/agent; the spawner's: the one
// that ran spawner-main) and each step (create = claim + refill, cmd, kill = kill + destroy): the
// sampled CPU per step (ms, V8's view: a blocking sync call counts as time, GC threads and the
// kernel's share of a fork do not), then the `top` functions and files by self time (and each
// function by the frame of ours nearest it: a sync call charged to our line that made it), in µs
// per step. `other` is every sample outside the steps' windows, in ms: start-up, the pool's first
// fill, the floors and the tail. bench/perf-window.ts gives on-CPU time with the kernel's share.
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { selfTimes, type CpuProfile } from "./v8-profile.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

interface Profile extends CpuProfile {
  startTime: number;
  endTime: number;
}
interface Marks {
  steps: number;
  marks: { step: string; from: number; to: number }[];
}

/** A source file by its URL, relative to the repository (Node's built-ins as `node:…`). */
export function fileOf(url: string): string {
  if (!url.startsWith("file://")) return url;
  const rel = relative(ROOT, fileURLToPath(url));
  return rel.startsWith("..") ? fileURLToPath(url) : rel;
}

/** The profile's samples whose time falls in one of `windows` (µs, the profile's clock), as a
 * profile of their own; selfTimes reads sample i's duration from timeDeltas[i + 1]. */
export function within(p: Profile, windows: { from: number; to: number }[]): CpuProfile {
  const samples: number[] = [];
  const timeDeltas: number[] = [0];
  let t = p.startTime;
  for (let i = 0; i < p.samples.length; i++) {
    t += p.timeDeltas[i] ?? 0;
    const dt = p.timeDeltas[i + 1] ?? 0;
    if (windows.some((w) => t >= w.from && t < w.to)) {
      samples.push(p.samples[i]!);
      timeDeltas.push(dt);
    }
  }
  return { nodes: p.nodes, samples, timeDeltas };
}

/** Self time by the sample's own function and the nearest frame of this repository's code below
 * it (`mkdir <- ensureDir local-driver.ts:40`): Node's and the libraries' frames between are
 * skipped, so a sync call or a stream's work is charged to the line of ours that asked for it. */
export function byOwnCaller(p: CpuProfile): Map<string, number> {
  const byId = new Map(p.nodes.map((x) => [x.id, x]));
  const parent = new Map<number, number>();
  for (const x of p.nodes) for (const c of x.children ?? []) parent.set(c, x.id);
  const own = (url: string) => url.startsWith("file://") && !url.includes("/node_modules/");
  const out = new Map<string, number>();
  for (let i = 0; i < p.samples.length; i++) {
    const node = byId.get(p.samples[i]!)!;
    if (node.callFrame.functionName === "(idle)") continue;
    let c: number | undefined = node.id;
    while (c !== undefined && !own(byId.get(c)!.callFrame.url)) c = parent.get(c);
    const f = c === undefined ? undefined : byId.get(c)!.callFrame;
    const key = `${node.callFrame.functionName || "(anonymous)"} <- ${f ? `${f.functionName || "(anonymous)"} ${fileOf(f.url)}:${f.lineNumber + 1}` : "(none of ours)"}`;
    out.set(key, (out.get(key) ?? 0) + (p.timeDeltas[i + 1] ?? 0));
  }
  return out;
}

function top(m: Map<string, number>, n: number, per: number): string[] {
  return [...m.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, n)
    .map(([k, v]) => `    ${String(Math.round(v / per)).padStart(6)}  ${k}`);
}

if (import.meta.main) {
  const dir = process.argv[2];
  if (!dir) throw new Error("usage: node bench/agent-profile.ts <dir with *.cpuprofile and marks.json> [top]");
  const n = Number(process.argv[3] ?? 25);
  const { steps, marks } = JSON.parse(readFileSync(join(dir, "marks.json"), "utf8")) as Marks;
  const stepNames = [...new Set(marks.map((m) => m.step))];
  for (const f of readdirSync(dir).filter((f) => f.endsWith(".cpuprofile"))) {
    const p = JSON.parse(readFileSync(join(dir, f), "utf8")) as Profile;
    const urls = p.nodes.map((x) => x.callFrame.url);
    const who = urls.some((u) => u.includes("spawner-main")) ? "spawner" : urls.some((u) => u.includes("controllers/agent/")) ? "agent" : "other";
    const all = selfTimes(p, fileOf);
    console.log(`\n== ${who} (${f}): ${(all.sampled / 1000).toFixed(0)} ms sampled over ${((p.endTime - p.startTime) / 1e6).toFixed(0)} s`);
    const outside: { from: number; to: number }[] = [];
    let from = p.startTime;
    for (const m of [...marks].sort((a, b) => a.from - b.from)) {
      outside.push({ from, to: m.from });
      from = m.to;
    }
    outside.push({ from, to: p.endTime + 1 });
    for (const step of [...stepNames, "other"]) {
      const other = step === "other";
      const windows = other ? outside : marks.filter((m) => m.step === step);
      // A step's figures in µs per step; `other` (no step) in ms in all.
      const per = other ? 1000 : steps * windows.length;
      const t = selfTimes(within(p, windows), fileOf);
      console.log(`\n-- ${step}: ${(t.sampled / per / (other ? 1 : 1000)).toFixed(2)} ms ${other ? "in all" : "per step"}`);
      console.log(`  by function (${other ? "ms" : "µs per step"}):`);
      for (const l of top(t.self, n, per)) console.log(l);
      console.log("  by function and our code's frame nearest it:");
      for (const l of top(byOwnCaller(within(p, windows)), n, per)) console.log(l);
      console.log("  by file, self:");
      for (const l of top(t.selfByFile, Math.ceil(n / 2), per)) console.log(l);
      console.log("  by file, with callees:");
      for (const l of top(t.total, Math.ceil(n / 2), per)) console.log(l);
    }
  }
}
