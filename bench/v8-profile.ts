// A V8 CPU profile of workerd's isolate over its inspector (workerd --inspector-addr), for the
// benchmarks' EDGE_BENCH_PROFILE / E2E_BENCH_EDGE_PROFILE: open the file in Chrome DevTools.
// `selfTimes` sums a profile's samples by function and by bundled source file (bench/claim-profile.ts).
import { readFileSync } from "node:fs";

/**
 * Starts V8's sampling profiler in the edge isolate over the DevTools protocol. `target`: the
 * workerd service whose isolate to profile (its inspector lists one per service), else the first.
 */
export async function startProfiler(port: number, target?: string): Promise<{ stop(): Promise<unknown> }> {
  const { call, close } = await inspect(port, target);
  await call("Profiler.enable");
  await call("Profiler.setSamplingInterval", { interval: 250 });
  await call("Profiler.start");
  return {
    async stop() {
      const { profile } = await call("Profiler.stop");
      close();
      return profile;
    },
  };
}

/** The isolate's JS heap in use after a full garbage collection, in bytes (workerd's inspector). */
export async function isolateHeapBytes(port: number, target?: string): Promise<number> {
  const { call, close } = await inspect(port, target);
  try {
    await call("HeapProfiler.collectGarbage");
    const { usedSize } = (await call("Runtime.getHeapUsage")) as { usedSize: number };
    return usedSize;
  } finally {
    close();
  }
}

/** A DevTools protocol session with one of workerd's isolates (`target`: its service, else the first). */
async function inspect(port: number, target?: string): Promise<{ call(method: string, params?: object): Promise<any>; close(): void }> {
  const targets = (await (await fetch(`http://127.0.0.1:${port}/json/list`)).json()) as { id?: string; title?: string; webSocketDebuggerUrl: string }[];
  const chosen = target ? targets.find((t) => t.id === target || t.title === target || t.webSocketDebuggerUrl.endsWith(`/${target}`)) : targets[0];
  if (!chosen) throw new Error(`inspector ${port}: no target "${target}" among ${JSON.stringify(targets.map((t) => t.id ?? t.title))}`);
  const ws = new WebSocket(chosen.webSocketDebuggerUrl);
  await new Promise((ok, fail) => {
    ws.addEventListener("open", ok);
    ws.addEventListener("error", fail);
  });
  const pending = new Map<number, (result: unknown) => void>();
  ws.addEventListener("message", (ev) => {
    const msg = JSON.parse(String(ev.data)) as { id?: number; result?: unknown };
    if (msg.id !== undefined) pending.get(msg.id)?.(msg.result);
  });
  let id = 0;
  const call = (method: string, params: object = {}) =>
    new Promise<any>((ok) => {
      pending.set(++id, ok);
      ws.send(JSON.stringify({ id, method, params }));
    });
  return { call, close: () => ws.close() };
}

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
export interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** Where each line of a bundle comes from: esbuild's `// path/of/module.ts` comments, line-indexed. */
export function bundleFiles(bundlePath: string): (line: number) => string {
  const starts: [number, string][] = [];
  readFileSync(bundlePath, "utf8")
    .split("\n")
    .forEach((l, i) => {
      const m = /^\/\/ ((?:node_modules\/|node-built-in-modules:|\.\.\/|[\w@-]+\/)[^\s]*)$/.exec(l);
      if (m) starts.push([i, m[1]!]);
    });
  return (line) => {
    let lo = 0;
    let hi = starts.length - 1;
    let found = "(bundle head)";
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (starts[mid]![0] <= line) {
        found = starts[mid]![1];
        lo = mid + 1;
      } else hi = mid - 1;
    }
    return found;
  };
}

/**
 * A profile's sampled time in µs: `self` by function (`name file:line`), `selfByFile` by source
 * file (a bundle line's module; V8's own entries such as (garbage collector) and (program) by
 * name), `total` by file including callees (each sample counted once per file on its stack), and
 * `sampled`, all samples but (idle). `nativeByCaller`: the self time of functions with no source
 * (the runtime's own: a Durable Object's SQLite `exec`, `transactionSync`, `setTimeout`…) by the
 * nearest caller that has a source (`exec <- unqueue store.ts:...`): a native call is a profile
 * node of its own, so a function's self time never holds the SQLite work it asked for, and a
 * ranking by function alone says nothing about which statements cost (session 19: session 18's
 * "ack delete ~300 µs per create" was 21 µs here, `exec <- unqueue` plus its flush).
 * `byKind`: the same time by what ran it (`kindOf`), so two sides compare where their code
 * differs in every function and file (the product against the feature skeleton).
 */
export function selfTimes(profile: CpuProfile, fileOf: (url: string, line: number) => string) {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const where = (n: ProfileNode) => (n.callFrame.url ? fileOf(n.callFrame.url, n.callFrame.lineNumber) : `(${n.callFrame.functionName || "native"})`);
  const self = new Map<string, number>();
  const selfByFile = new Map<string, number>();
  const total = new Map<string, number>();
  const nativeByCaller = new Map<string, number>();
  const byKind = new Map<string, number>();
  let sampled = 0;
  const add = (m: Map<string, number>, k: string, v: number) => m.set(k, (m.get(k) ?? 0) + v);
  for (let i = 0; i < profile.samples.length; i++) {
    const dt = profile.timeDeltas[i + 1] ?? 0;
    const node = byId.get(profile.samples[i]!)!;
    if (node.callFrame.functionName === "(idle)") continue;
    sampled += dt;
    const file = where(node);
    add(self, `${node.callFrame.functionName || "(anonymous)"} ${file}:${node.callFrame.lineNumber + 1}`, dt);
    add(selfByFile, file, dt);
    add(byKind, kindOf(node.callFrame, file), dt);
    if (!node.callFrame.url && node.callFrame.functionName && !node.callFrame.functionName.startsWith("(")) {
      let caller = parent.get(node.id);
      while (caller !== undefined && !byId.get(caller)!.callFrame.url) caller = parent.get(caller);
      const c = caller === undefined ? null : byId.get(caller)!;
      add(nativeByCaller, `${node.callFrame.functionName} <- ${c ? `${c.callFrame.functionName || "(anonymous)"} ${where(c)}:${c.callFrame.lineNumber + 1}` : "(no JS caller)"}`, dt);
    }
    const seen = new Set<string>();
    for (let id: number | undefined = node.id; id !== undefined; id = parent.get(id)) {
      const f = where(byId.get(id)!);
      if (!seen.has(f)) {
        seen.add(f);
        add(total, f, dt);
      }
    }
  }
  return { self, selfByFile, total, nativeByCaller, byKind, sampled };
}

/** A Durable Object's SQLite calls: statements (`exec` and its cursor's reads) and commits asked for. */
const SQL_STATEMENT = new Set(["exec", "toArray", "one", "next", "raw"]);
const SQL_COMMIT = new Set(["transactionSync", "transaction", "sync"]);

/**
 * What a sample's time was spent on, by the frame that ran: bundled code (libraries apart from
 * the bundle's own modules), V8's own entries (`(program)`: the runtime's C++ between JS calls
 * and outside them; `(garbage collector)`), SQLite statements, SQLite commits, or any other call
 * into the runtime (timers, Response, RPC stubs' `get`, body reads…). `file`: the frame's source
 * file as `selfTimes` names it.
 */
export function kindOf(frame: { functionName: string; url: string }, file: string): string {
  if (frame.url) return file.startsWith("node_modules/") ? "JS: libraries (node_modules)" : "JS: own modules";
  if (frame.functionName === "(program)" || frame.functionName === "(garbage collector)") return frame.functionName;
  if (SQL_STATEMENT.has(frame.functionName)) return "SQLite statements (exec, cursor reads)";
  if (SQL_COMMIT.has(frame.functionName)) return "SQLite commits asked for (transactionSync, sync)";
  return "other runtime calls";
}
