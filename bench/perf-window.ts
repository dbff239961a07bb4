// On-CPU time of the e2e bench's window by process, from the `perf` recording E2E_BENCH_PERF
// makes (bench/e2e.ts):
//   node bench/perf-window.ts <perf.data> '<parts JSON the bench printed>' [top]
// Per part (agent, spawner, edge, sqld), per create: on-CPU ms (cpu-clock samples at 999 Hz),
// the main thread's and the V8 threads' (JIT compiler, GC), the kernel's by system call, the
// fsync/fdatasync and clone (fork, thread) calls made, and for workerd the share spent in its
// Durable Objects' SQLite commits (the WAL write and its fsync: durability, not our JS) and
// queries. A V8 CPU profile cannot give these: it samples a thread blocked in a synchronous call
// as busy and never sees the compiler and GC threads. With
// SBX_AGENT_NODE_ARGS=--perf-basic-prof-only-functions the agent's JS functions are named too
// (the innermost one of ours per sample; JIT code moved by the GC can be misnamed, so read those
// as hints). PERF_TIME=<start>,<end> (seconds) cuts a longer recording.
import { execFileSync } from "node:child_process";

interface Sample {
  pid: number;
  tid: number;
  event: string;
  frames: string[];
  kernelLeaf: boolean;
}

/** `perf script` output as samples: a header line, then one indented line per frame. */
function samples(file: string, time?: string): Sample[] {
  const text = execFileSync("perf", ["script", "-i", file, ...(time ? ["--time", time] : []), "-F", "pid,tid,event,ip,sym,dso"], { encoding: "utf8", maxBuffer: 1 << 30, stdio: ["ignore", "pipe", "ignore"] });
  const out: Sample[] = [];
  let cur: Sample | undefined;
  for (const line of text.split("\n")) {
    if (!line.trim()) continue;
    if (!line.startsWith("\t")) {
      const m = /^\s*(\d+)\/(\d+)\s+(\S+):\s*$/.exec(line);
      if (!m) continue;
      cur = { pid: Number(m[1]), tid: Number(m[2]), event: m[3]!, frames: [], kernelLeaf: false };
      out.push(cur);
      continue;
    }
    const f = /^\s*[0-9a-f]+\s+(.*) \((.*)\)\s*$/.exec(line);
    if (!f || !cur) continue;
    if (cur.frames.length === 0) cur.kernelLeaf = f[2] === "[kernel.kallsyms]";
    cur.frames.push(f[1]!);
  }
  return out;
}

const JIT = /compiler::|OptimizingCompile|maglev::|turboshaft|Compiler::/;
const GC = /Heap::|Scavenge|MarkCompact|Sweeper|ConcurrentMarking|MinorMark|cppgc::internal|MarkingVisitor|Evacuat/;
const SQLITE_COMMIT = /vdbeCommit|sqlite3PagerCommit/;
const SQLITE = /sqlite3|SqliteDatabase/;
const OURS = /file:\/\/\S*\/(controllers|schema|durable-objects|functions)\/(\S+)/;

function count<K>(m: Map<K, number>, k: K): void {
  m.set(k, (m.get(k) ?? 0) + 1);
}

function report(all: Sample[], parts: Record<string, number>, creates: number, top: number): void {
  const per = (n: number) => (n / creates).toFixed(2);
  for (const [part, pid] of Object.entries(parts)) {
    if (part === "creates" || part === "bench") continue;
    const mine = all.filter((s) => s.pid === pid);
    const cpu = mine.filter((s) => s.event.startsWith("cpu-clock"));
    const calls = (re: RegExp) => mine.filter((s) => re.test(s.event)).length;
    const syncs = calls(/fsync|fdatasync/);
    const forks = calls(/sys_enter_clone/);
    const by = { main: 0, jit: 0, gc: 0, kernel: 0, sqliteCommit: 0, sqlite: 0 };
    const syscalls = new Map<string, number>();
    const ours = new Map<string, number>();
    for (const s of cpu) {
      if (s.tid === s.pid) by.main++;
      if (s.frames.some((f) => JIT.test(f))) by.jit++;
      else if (s.frames.some((f) => GC.test(f))) by.gc++;
      if (s.frames.some((f) => SQLITE_COMMIT.test(f))) by.sqliteCommit++;
      else if (s.frames.some((f) => SQLITE.test(f))) by.sqlite++;
      if (s.kernelLeaf) {
        by.kernel++;
        count(syscalls, s.frames.find((f) => f.startsWith("__x64_sys_") || f.startsWith("__do_sys_"))?.replace(/^__(x64|do)_sys_/, "") ?? "(fault, irq, other)");
      }
      const js = s.frames.map((f) => OURS.exec(f)).find((m) => m);
      if (js) count(ours, `${s.frames.find((f) => OURS.test(f))!.split(" ")[0]!.replace(/^JS:[*^~]?/, "")} ${js[1]}/${js[2]}`);
    }
    const ms = cpu.length * (1000 / 999);
    console.log(`\n${part} (pid ${pid}): ${per(ms)} ms on CPU per create (${cpu.length} samples), fsync/fdatasync calls per create ${per(syncs)}, forks (clone) ${per(forks)}`);
    console.log(`  main thread ${per(by.main)}, V8 JIT compiler ${per(by.jit)}, GC ${per(by.gc)}, kernel ${per(by.kernel)}${by.sqliteCommit + by.sqlite ? `, SQLite commits ${per(by.sqliteCommit)} and the rest of SQLite ${per(by.sqlite)}` : ""}`);
    const list = (m: Map<string, number>) => [...m].sort((a, b) => b[1] - a[1]).slice(0, top).map(([k, v]) => `${k} ${per(v)}`).join("; ");
    if (syscalls.size) console.log(`  kernel by system call: ${list(syscalls)}`);
    if (ours.size) console.log(`  innermost function of ours: ${list(ours)}`);
  }
}

if (import.meta.main) {
  const [file, partsJson, top] = process.argv.slice(2);
  if (!file || !partsJson) throw new Error("usage: node bench/perf-window.ts <perf.data> '<parts JSON>' [top]");
  const parts = JSON.parse(partsJson) as Record<string, number>;
  // PERF_TIME=<start>,<end> (seconds, CLOCK_MONOTONIC): a recording longer than the window.
  report(samples(file, process.env.PERF_TIME), parts, parts.creates ?? 100, Number(top ?? 8));
}
