// agent-runtime benchmark: SDK command overhead against a direct spawn, idle memory, memory
// growth over 1000 commands, and 100 MB file throughput; and the ratios of issue 16.3, each
// against its floor measured interleaved in the same run: cold start against a bare Node HTTP
// server's, a 2,000-entry listing against readdir + lstat, 1 MB of stdout against a direct
// spawn's, run p99 against the direct spawn's p99. The runtime runs as its own process,
// standalone and bundled as sandboxes run it (controllers/runtime/bundle.ts), so its RSS is its
// own; the SDK talks to it over loopback. Idle RSS is also taken for the .ts sources.
//   node bench/runtime.ts            prints the figures
//   npm run bench -- runtime         as part of bench/results.json
import { spawn, type ChildProcess } from "node:child_process";
import { randomFillSync } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { lstat, readdir, readFile, writeFile } from "node:fs/promises";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Sandbox } from "e2b";
import type { Plugin } from "esbuild";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { bundleRuntime, bundleRuntimeSnapshot, RUNTIME_NODE_FLAGS, writeCodeCache, writeSnapshot } from "../controllers/runtime/bundle.ts";
import { HostView } from "../controllers/runtime/host-view.ts";
import { createRuntime } from "../controllers/runtime/runtime.ts";
import { ENVD_VERSION } from "../controllers/runtime/version.ts";
import { cpuMs, statusKB, threadsCpuMs } from "./stats.ts";

type Figures = Record<string, { value: number; unit: string; target?: string; spread?: [number, number] }>;

/** RUNTIME_BENCH_ONLY=cold,idle,run,list,stdout,growth,io runs only those parts (default: all). */
const ONLY = process.env.RUNTIME_BENCH_ONLY?.split(",");
const part = (name: string) => !ONLY || ONLY.includes(name);
const r2 = (x: number) => Math.round(x * 100) / 100;
const minMax = (xs: number[]): [number, number] => [r2(Math.min(...xs)), r2(Math.max(...xs))];

const ROOT = resolve(import.meta.dirname, "..");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
};

/** VmRSS, or RssAnon (private memory: what each extra process really costs, since the node
 * binary's file pages are shared). */
const rssMB = (pid: number, field = "VmRSS"): number => statusKB(pid, field) / 1024;

/** `entry` with the runtime's flags (main.ts re-executes itself to get them), or `nodeArgs` as
 * given (a start from the snapshot, as a pod starts it: flags and allocator set by its launcher). */
async function startRuntime(entry: string | { nodeArgs: string[] }): Promise<{ child: ChildProcess; url: string }> {
  const runtimeArgs = ["--port", "0", "--host", "127.0.0.1"];
  const [args, env] = typeof entry === "string" ? [[entry, ...runtimeArgs], process.env] : [[...entry.nodeArgs, "--", ...runtimeArgs], { ...process.env, MALLOC_ARENA_MAX: "2" }];
  const child = spawn(process.execPath, args, { cwd: ROOT, stdio: ["ignore", "pipe", "inherit"], env });
  const url = await new Promise<string>((res, rej) => {
    child.stdout!.on("data", (d) => {
      const m = /listening on (http:\/\/\S+)/.exec(String(d));
      if (m) res(m[1]!);
    });
    child.once("exit", (code) => rej(new Error(`runtime exited ${code}`)));
  });
  return { child, url };
}

/** Just enough control plane for Sandbox.create to hand back a Sandbox bound to the runtime. */
async function fakeControlPlane(): Promise<{ url: string; close(): void }> {
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      if (req.method === "POST" && req.url === "/v2/sandboxes") {
        res.writeHead(201, { "content-type": "application/json" }).end(JSON.stringify({ sandboxID: "bench", templateID: "base", clientID: "bench", envdVersion: ENVD_VERSION }));
      } else res.writeHead(204).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => server.close() };
}

/** exec → first 2xx of GET /health, and the process's CPU time and VmRSS then. */
async function coldStart(args: string[], env: Record<string, string> = {}): Promise<{ ms: number; cpu: number; rss: number }> {
  const t = performance.now();
  // As a pod starts it: the launcher sets the allocator (no re-exec; k8s/injection-config.yaml).
  const child = spawn(process.execPath, args, { cwd: ROOT, stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, MALLOC_ARENA_MAX: "2", ...env } });
  try {
    const url = await new Promise<string>((res, rej) => {
      let out = "";
      child.stdout!.on("data", (d) => {
        out += d;
        const m = /listening on (http:\/\/\S+)/.exec(out);
        if (m) res(m[1]!);
      });
      child.once("exit", (code) => rej(new Error(`exited ${code}`)));
    });
    for (;;) {
      const ok = await fetch(`${url}/health`).then((r) => r.status < 300, () => false);
      if (ok) break;
      await sleep(1);
    }
    return { ms: performance.now() - t, cpu: threadsCpuMs(child.pid!), rss: rssMB(child.pid!) };
  } finally {
    child.kill("SIGKILL");
  }
}


/** The floor of a cold start: Node itself serving HTTP, nothing loaded. */
const BARE_SERVER = `const s = require("node:http").createServer((q, r) => r.writeHead(204).end()); s.listen(0, "127.0.0.1", () => console.log("listening on http://127.0.0.1:" + s.address().port));`;

const quantile = (xs: number[], q: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * q))]!;
const spread = (xs: number[]) => `p25 ${quantile(xs, 0.25).toFixed(2)}, p75 ${quantile(xs, 0.75).toFixed(2)}`;

/** The floor: the same command with the environment the runtime gives it. */
const BASH_ENV = { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", HOME: "/root", USER: "root", LOGNAME: "root" };
function spawnBash(): Promise<void> {
  return new Promise((res, rej) => {
    const c = spawn("/bin/bash", ["-l", "-c", "true"], { stdio: "ignore", env: BASH_ENV, cwd: "/root" });
    c.once("exit", () => res());
    c.once("error", rej);
  });
}

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t = performance.now();
  await fn();
  return performance.now() - t;
}

async function idleRss(entry: string, apiUrl: string): Promise<{ rss: number; anon: number }> {
  const { child, url } = await startRuntime(entry);
  try {
    const sbx = await Sandbox.create("base", { apiKey: `e2b_${"0".repeat(40)}`, apiUrl, sandboxUrl: url });
    await sbx.commands.run("true");
    await sleep(1500);
    return { rss: rssMB(child.pid!), anon: rssMB(child.pid!, "RssAnon") };
  } finally {
    child.kill("SIGTERM");
  }
}

/** Private memory (USS: pages no other process maps) of a live process, in MB. */
function ussMB(pid: number): number {
  const rollup = readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
  const kb = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(rollup)![1]);
  return (kb("Private_Clean") + kb("Private_Dirty")) / 1024;
}

/** Memory flags a small single-purpose server can use: the smallest young generation, one V8
 * worker thread, and V8's lite mode (no optimizing compiler, feedback allocated lazily). */
const LEAN_FLAGS = ["--max-semi-space-size=1", "--v8-pool-size=1", "--lite-mode"];

interface Idle { rss: number; anon: number; uss: number }

/** A server started with `args` (as a pod starts it: MALLOC_ARENA_MAX=2, unless `plain`), idle
 * 1.5 s after serving: the runtime one SDK command (`apiUrl`), the bare server five requests. */
async function idleOf(args: string[], opts: { apiUrl?: string; plain?: boolean } = {}): Promise<Idle> {
  const env = opts.plain ? process.env : { ...process.env, MALLOC_ARENA_MAX: "2" };
  // stderr ignored: V8 says under --lite-mode that it disables WebAssembly, on every start.
  const child = spawn(process.execPath, args, { cwd: ROOT, stdio: ["ignore", "pipe", "ignore"], env });
  try {
    const url = await new Promise<string>((res, rej) => {
      let out = "";
      child.stdout!.on("data", (d) => {
        out += d;
        const m = /listening on (http:\/\/\S+)/.exec(out);
        if (m) res(m[1]!);
      });
      child.once("exit", (code) => rej(new Error(`${args.join(" ")} exited ${code}`)));
    });
    if (opts.apiUrl) {
      const sbx = await Sandbox.create("base", { apiKey: `e2b_${"0".repeat(40)}`, apiUrl: opts.apiUrl, sandboxUrl: url });
      await sbx.commands.run("true");
    } else for (let i = 0; i < 5; i++) await fetch(`${url}/health`).then((r) => r.arrayBuffer());
    await sleep(1500);
    return { rss: rssMB(child.pid!), anon: rssMB(child.pid!, "RssAnon"), uss: ussMB(child.pid!) };
  } finally {
    child.kill("SIGKILL");
  }
}

/**
 * Idle memory, the sides interleaved (3 rotating rounds): the runtime as a pod starts it (from its
 * startup snapshot), from a snapshot without the built-ins' code cache, and as it starts without a
 * snapshot (start.cjs, code cache), with the pod's flags, and from its snapshot with LEAN_FLAGS;
 * and its floor, a bare Node HTTP server, with no flags at all, with the runtime's and with
 * LEAN_FLAGS. RSS counts the node binary's file pages (shared by every node
 * process on the machine); USS, the private pages, is what one more runtime costs.
 */
async function idleMemory(dir: string, bare: string, apiUrl: string): Promise<Figures> {
  const blob = join(dir, "main.blob");
  const runtimeArgs = ["--port", "0", "--host", "127.0.0.1"];
  const sides = {
    snapshot: () => idleOf([...RUNTIME_NODE_FLAGS, "--snapshot-blob", blob, "--", ...runtimeArgs], { apiUrl }),
    codeCache: () => idleOf([...RUNTIME_NODE_FLAGS, join(dir, "start.cjs"), ...runtimeArgs], { apiUrl }),
    leanSnapshot: () => idleOf([...RUNTIME_NODE_FLAGS, "--snapshot-blob", join(dir, "lean.blob"), "--", ...runtimeArgs], { apiUrl }),
    snapshotLean: () => idleOf([...LEAN_FLAGS, "--snapshot-blob", blob, "--", ...runtimeArgs], { apiUrl }),
    bare: () => idleOf([...RUNTIME_NODE_FLAGS, bare]),
    bareNoFlags: () => idleOf([bare], { plain: true }),
    bareLean: () => idleOf([...LEAN_FLAGS, bare]),
  };
  const got = await rotating(sides, 3);
  const med = (side: keyof typeof sides, f: keyof Idle) => r2(median(got[side].map((x) => x[f])));
  const floor = Math.min(med("bare", "rss"), med("bareNoFlags", "rss"), med("bareLean", "rss"));
  const stopped = floor > 35 ? `; out of reach: Node itself, a bare HTTP server, idles at ${floor} MB with any of the flag sets measured` : "";
  const fig = (value: number, unit: string, target?: string) => ({ value, unit, ...(target ? { target } : {}) });
  return {
    "runtime.idle_rss_mb": fig(med("snapshot", "rss"), "MB (from its startup snapshot, as a pod starts it; 3 rounds interleaved with the sides below)", `<= 35 (floor: idle_rss_floor_mb${stopped})`),
    "runtime.idle_private_mb": fig(med("snapshot", "uss"), "MB USS (smaps_rollup Private_*: what one more runtime costs)"),
    "runtime.idle_anon_mb": fig(med("snapshot", "anon"), "MB RssAnon"),
    "runtime.idle_rss_floor_mb": fig(floor, "MB (the lowest median of the bare Node HTTP server's sides below)"),
    "runtime.idle_rss_over_bare_node_ratio": fig(r2(med("snapshot", "rss") / med("bare", "rss")), "x (the bare server with the same flags, same rounds)"),
    "runtime.idle_rss_above_bare_node_mb": fig(r2(med("snapshot", "rss") - med("bare", "rss")), "MB (what the runtime adds to its floor)"),
    "runtime.idle_private_above_bare_node_mb": fig(r2(med("snapshot", "uss") - med("bare", "uss")), "MB USS"),
    "runtime.idle_rss_mb_code_cache_start": fig(med("codeCache", "rss"), "MB (start.cjs from the code cache: the pod's entry without a snapshot)"),
    "runtime.idle_private_mb_code_cache_start": fig(med("codeCache", "uss"), "MB USS"),
    "runtime.idle_rss_mb_snapshot_without_code_cache": fig(med("leanSnapshot", "rss"), "MB (from a snapshot without the built-ins' code cache)"),
    "runtime.idle_private_mb_snapshot_without_code_cache": fig(med("leanSnapshot", "uss"), "MB USS"),
    "runtime.idle_rss_mb_lean_flags": fig(med("snapshotLean", "rss"), `MB (from the snapshot with ${LEAN_FLAGS.join(" ")})`),
    "runtime.idle_private_mb_lean_flags": fig(med("snapshotLean", "uss"), "MB USS"),
    "runtime.bare_node_server_idle_rss_mb": fig(med("bare", "rss"), `MB (the runtime's flags ${RUNTIME_NODE_FLAGS.join(" ")}, MALLOC_ARENA_MAX=2)`),
    "runtime.bare_node_server_idle_private_mb": fig(med("bare", "uss"), "MB USS"),
    "runtime.bare_node_server_idle_rss_mb_no_flags": fig(med("bareNoFlags", "rss"), "MB (no node flags, glibc's default arenas)"),
    "runtime.bare_node_server_idle_private_mb_no_flags": fig(med("bareNoFlags", "uss"), "MB USS"),
    "runtime.bare_node_server_idle_rss_mb_lean_flags": fig(med("bareLean", "rss"), `MB (${LEAN_FLAGS.join(" ")})`),
    "runtime.bare_node_server_idle_private_mb_lean_flags": fig(med("bareLean", "uss"), "MB USS"),
  };
}

/** Heap cost of one registered idle sandbox in an embedded runtime (the local driver's mode). */
function perSandboxKB(): number {
  setFlagsFromString("--expose-gc");
  const gc = runInNewContext("gc") as () => void;
  const runtime = createRuntime();
  const view = new HostView();
  gc();
  const before = process.memoryUsage().heapUsed;
  for (let i = 0; i < 1000; i++) runtime.addSandbox(`s${i}`, view, { accessToken: `token-${i}`, envVars: { A: "1" }, defaultUser: "root" });
  gc();
  const after = process.memoryUsage().heapUsed;
  void runtime.close();
  return (after - before) / 1000 / 1024;
}

export async function run(_ctx?: unknown): Promise<Figures> {
  const figures: Figures = {};
  if (part("idle")) figures["runtime.embedded_heap_per_idle_sandbox_kb"] = { value: perSandboxKB(), unit: "KB" };
  mkdirSync(join(ROOT, "dist"), { recursive: true });
  // Inside the repository, so the bundle resolves its one external (@lydell/node-pty).
  const dir = mkdtempSync(join(ROOT, "dist", "runtime-bench-"));
  const bundle = await bundleRuntime(join(dir, "main.cjs"));
  writeCodeCache(bundle);
  // main.blob beside it, as the image build makes it, and one without the built-ins' code cache.
  const snapshotBundle = await bundleRuntimeSnapshot(join(dir, "snapshot.cjs"));
  writeSnapshot(snapshotBundle);
  writeSnapshot(snapshotBundle, { name: "lean.blob", withoutCodeCache: true });
  const bare = join(dir, "bare.cjs");
  writeFileSync(bare, BARE_SERVER);
  const api = await fakeControlPlane();
  // As a pod runs it (k8s/entrypoint.sh).
  const { child, url } = await startRuntime({ nodeArgs: [...RUNTIME_NODE_FLAGS, "--snapshot-blob", join(dir, "main.blob")] });
  try {
    if (part("cold")) Object.assign(figures, await coldStarts(bundle, bare), await tracingOffStart(bundle, dir));
    if (part("idle")) {
      Object.assign(figures, await idleMemory(dir, bare, api.url));
      figures["runtime.idle_rss_mb_from_source"] = { value: (await idleRss("controllers/runtime/main.ts", api.url)).rss, unit: "MB" };
    }
    const sbx = await Sandbox.create("base", { apiKey: `e2b_${"0".repeat(40)}`, apiUrl: api.url, sandboxUrl: url });

    if (part("run")) {
      // Interleaved so drift on a shared machine hits both sides alike.
      const viaSdk: number[] = [];
      const direct: number[] = [];
      for (let i = 0; i < 20; i++) {
        await sbx.commands.run("true");
        await spawnBash();
      }
      for (let i = 0; i < 200; i++) {
        viaSdk.push(await timed(() => sbx.commands.run("true")));
        direct.push(await timed(spawnBash));
      }
      figures["runtime.run_overhead_ratio"] = { value: median(viaSdk) / median(direct), unit: "x", target: "<= 1.5" };
      figures["runtime.run_p99_ratio"] = { value: quantile(viaSdk, 0.99) / quantile(direct, 0.99), unit: "x", target: "<= 1.4" };
      figures["runtime.run_median_ms"] = { value: median(viaSdk), unit: "ms" };
      figures["runtime.direct_spawn_median_ms"] = { value: median(direct), unit: "ms" };
    }

    if (part("list")) {
      // A 2,000-entry listing against readdir + lstat of each, interleaved.
      const listDir = `/tmp/runtime-bench-list-${process.pid}`;
      mkdirSync(listDir, { recursive: true });
      for (let i = 0; i < 2000; i++) writeFileSync(`${listDir}/f${i}`, "x");
      const ratios: number[] = [];
      await sbx.files.list(listDir);
      for (let i = 0; i < 15; i++) {
        const a = await timed(() => sbx.files.list(listDir));
        const b = await timed(async () => {
          for (const name of await readdir(listDir)) await lstat(`${listDir}/${name}`, { bigint: true });
        });
        ratios.push(a / b);
      }
      rmSync(listDir, { recursive: true, force: true });
      figures["runtime.list_2000_ratio"] = { value: median(ratios), unit: "x (median of 15 pairs)", target: "<= 2.0", spread: minMax(ratios) };
    }

    if (part("stdout")) {
      // 1 MB of stdout through the SDK against reading the same command's output from a direct spawn.
      const mb = "head -c 1048576 /dev/zero | tr '\\0' a";
      const ratios: number[] = [];
      for (let i = 0; i < 15; i++) {
        const a = await timed(() => sbx.commands.run(mb));
        const b = await timed(() => new Promise<void>((res, rej) => {
          const c = spawn("/bin/bash", ["-l", "-c", mb], { stdio: ["ignore", "pipe", "ignore"], env: BASH_ENV, cwd: "/root" });
          c.stdout.resume();
          c.once("exit", () => res());
          c.once("error", rej);
        }));
        ratios.push(a / b);
      }
      figures["runtime.stdout_1mb_ratio"] = { value: median(ratios), unit: "x (median of 15 pairs)", target: "<= 3.5", spread: minMax(ratios) };
    }

    if (part("growth")) {
      // Growth is measured from a warmed-up working set (heap and malloc arenas settle within a
      // few hundred runs, see README), so what remains is what 1000 runs leave behind.
      for (let i = 0; i < 300; i++) await sbx.commands.run("true");
      await sleep(5000);
      const before = rssMB(child.pid!);
      for (let i = 0; i < 1000; i++) await sbx.commands.run("true");
      await sleep(5000);
      figures["runtime.rss_growth_mb_after_1000_runs"] = { value: rssMB(child.pid!) - before, unit: "MB", target: "<= 10" };
    }

    if (part("io")) Object.assign(figures, await transfers(sbx, child.pid!));
    return figures;
  } finally {
    api.close();
    child.kill("SIGTERM");
    rmSync(dir, { recursive: true, force: true });
  }
}

/** `rounds` rounds of one run of each side, the order rotating each round (drift on a shared
 * machine hits every side alike). */
async function rotating<K extends string, T>(sides: Record<K, () => Promise<T>>, rounds: number): Promise<Record<K, T[]>> {
  const names = Object.keys(sides) as K[];
  const got = Object.fromEntries(names.map((n) => [n, [] as T[]])) as Record<K, T[]>;
  for (let i = 0; i < rounds; i++) {
    for (let k = 0; k < names.length; k++) {
      const name = names[(i + k) % names.length]!;
      got[name].push(await sides[name]());
    }
  }
  return got;
}

/** Cold start, the sides interleaved (one of each per round, the order rotating): the runtime as a
 * pod starts it (from the startup snapshot the image build writes, main.blob), as it starts without
 * one (start.cjs from the code cache the image build writes), the bundle without either, and the
 * bare server. Wall time and the process's CPU time at its first 2xx. */
async function coldStarts(bundle: string, bare: string): Promise<Figures> {
  const start = join(dirname(bundle), "start.cjs");
  const blob = join(dirname(bundle), "main.blob");
  const runtimeArgs = ["--port", "0", "--host", "127.0.0.1"];
  const sides = {
    snapshot: () => coldStart([...RUNTIME_NODE_FLAGS, "--snapshot-blob", blob, "--", ...runtimeArgs]),
    leanSnapshot: () => coldStart([...RUNTIME_NODE_FLAGS, "--snapshot-blob", join(dirname(bundle), "lean.blob"), "--", ...runtimeArgs]),
    cached: () => coldStart([...RUNTIME_NODE_FLAGS, start, ...runtimeArgs]),
    plain: () => coldStart([...RUNTIME_NODE_FLAGS, bundle, ...runtimeArgs]),
    bare: () => coldStart([...RUNTIME_NODE_FLAGS, bare]),
  };
  const rounds = 15;
  const got = await rotating(sides, rounds);
  const per = (a: keyof typeof sides, b: keyof typeof sides, f: "ms" | "cpu") => got[a].map((x, i) => x[f] / got[b][i]![f]);
  const ratios = per("snapshot", "bare", "ms");
  const figure = (xs: number[], unit: string, target?: string) => ({ value: r2(median(xs)), unit, spread: minMax(xs), ...(target ? { target } : {}) });
  return {
    "runtime.cold_start_ms": figure(got.snapshot.map((x) => x.ms), "ms (from the startup snapshot, as a pod starts it)"),
    "runtime.bare_node_server_start_ms": figure(got.bare.map((x) => x.ms), "ms"),
    "runtime.cold_start_ratio": { value: r2(median(ratios)), unit: `x (wall; median of ${rounds} rounds; ${spread(ratios)})`, target: "<= 1.0", spread: minMax(ratios) },
    "runtime.cold_start_cpu_ms": figure(got.snapshot.map((x) => x.cpu), "ms CPU to the first 2xx"),
    "runtime.bare_node_server_start_cpu_ms": figure(got.bare.map((x) => x.cpu), "ms CPU"),
    "runtime.cold_start_cpu_ratio": figure(per("snapshot", "bare", "cpu"), "x (CPU, same rounds)", "<= 1.0"),
    "runtime.cold_start_snapshot_without_code_cache_cpu_ratio": figure(per("leanSnapshot", "bare", "cpu"), "x (CPU: from a snapshot without the built-ins' code cache, writeSnapshot withoutCodeCache)"),
    "runtime.cold_start_code_cache_cpu_ratio": figure(per("cached", "bare", "cpu"), "x (CPU: start.cjs from the code cache, the pod's entry without a snapshot)"),
    "runtime.cold_start_code_cache_ratio": figure(per("cached", "bare", "ms"), "x (wall, the same)"),
    "runtime.cold_start_no_code_cache_cpu_ratio": figure(per("plain", "bare", "cpu"), "x (CPU: the bundle alone)"),
    "runtime.cold_start_snapshot_cpu_gain": figure(per("snapshot", "cached", "cpu"), "x (CPU, from the snapshot over from the code cache, same round)"),
    "runtime.cold_start_code_cache_cpu_gain": figure(per("cached", "plain", "cpu"), "x (CPU, code cache over none, same round)"),
    "runtime.cold_start_rss_mb": { value: r2(median(got.snapshot.map((x) => x.rss))), unit: "MB (at its first 2xx)" },
    "runtime.bare_node_server_rss_mb": { value: r2(median(got.bare.map((x) => x.rss))), unit: "MB (at its first 2xx)" },
  };
}

/**
 * The runtime's start with tracing off (issue 15: no cost when off). Four sides interleaved, each
 * from its own startup snapshot as a pod starts it: the shipped bundle with tracing off (no
 * OTEL_EXPORTER_OTLP_ENDPOINT), the same with it on (a collector address nobody answers: the
 * start does not wait for an export), with RUNTIME_TRACING=agent (spans kept for the agent, as
 * the kubernetes driver starts pods with --pod-runtime-tracing), and the floor, a snapshot of a
 * bundle built without the tracing module at all (pod-tracing.ts replaced by an empty one). Beside
 * them, how many @opentelemetry modules a start with tracing off evaluates (a build whose
 * OpenTelemetry modules count themselves): 0 means the exporter and the API stay unloaded.
 */
async function tracingOffStart(bundle: string, dir: string): Promise<Figures> {
  const noTracing: Plugin = { name: "no-pod-tracing", setup: (b) => b.onLoad({ filter: /controllers\/runtime\/pod-tracing\.ts$/ }, () => ({ contents: "export {};", loader: "ts" })) };
  const untraced = writeSnapshot(await bundleRuntimeSnapshot(join(dir, "untraced", "snapshot.cjs"), { plugins: [noTracing] }));
  const counted = await countingOtelModules(dir);
  const runtimeArgs = ["--port", "0", "--host", "127.0.0.1"];
  const start = (blob: string) => [...RUNTIME_NODE_FLAGS, "--snapshot-blob", blob, "--", ...runtimeArgs];
  const shipped = join(dirname(bundle), "main.blob");
  const sides = {
    off: () => coldStart(start(shipped)),
    on: () => coldStart(start(shipped), { OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:9" }),
    agent: () => coldStart(start(shipped), { RUNTIME_TRACING: "agent" }),
    floor: () => coldStart(start(untraced)),
  };
  const got = await rotating(sides, 15);
  const per = (a: keyof typeof sides, b: keyof typeof sides, f: "ms" | "cpu") => got[a].map((x, i) => x[f] / got[b][i]![f]);
  const figure = (xs: number[], unit: string, target?: string) => ({ value: r2(median(xs)), unit, spread: minMax(xs), ...(target ? { target } : {}) });
  return {
    "runtime.cold_start_tracing_off_ratio": figure(per("off", "floor", "ms"), "x (tracing off over a build without tracing; 15 interleaved rounds)", "<= 1.05"),
    "runtime.cold_start_tracing_off_cpu_ratio": figure(per("off", "floor", "cpu"), "x (CPU, same rounds)", "<= 1.05"),
    "runtime.cold_start_tracing_off_cpu_ms": figure(got.off.map((x) => x.cpu), "ms CPU to the first 2xx"),
    "runtime.cold_start_tracing_on_cpu_ratio": figure(per("on", "off", "cpu"), "x (CPU, tracing on over off: what loading the exporter costs)"),
    "runtime.cold_start_tracing_agent_cpu_ratio": figure(per("agent", "off", "cpu"), "x (CPU, RUNTIME_TRACING=agent, as a pod with --pod-runtime-tracing, over off)"),
    "runtime.tracing_off_otel_modules_evaluated": { value: await otelModulesEvaluated(counted, runtimeArgs, ""), unit: "@opentelemetry modules evaluated by a start with tracing off", target: "0" },
    // The same count with tracing on: that the count sees the modules when they load.
    "runtime.tracing_on_otel_modules_evaluated": { value: await otelModulesEvaluated(counted, runtimeArgs, "http://127.0.0.1:9"), unit: "@opentelemetry modules evaluated by a start with tracing on" },
  };
}

/** A build whose each @opentelemetry module counts itself when evaluated (SIGUSR2 prints the count). */
function countingOtelModules(dir: string): Promise<string> {
  return bundleRuntime(join(dir, "counted", "main.cjs"), {
    banner: { js: `process.on("SIGUSR2", () => console.log("otel-modules " + (globalThis.__otelModules ?? 0)));` },
    plugins: [
      {
        name: "count-otel-modules",
        setup: (b) =>
          b.onLoad({ filter: /node_modules\/@opentelemetry\/.*\.m?js$/ }, async (args) => ({
            contents: `globalThis.__otelModules = (globalThis.__otelModules ?? 0) + 1;\n${await readFile(args.path, "utf8")}`,
            loader: "js",
          })),
      },
    ],
  });
}

/** How many @opentelemetry modules a start of `counted` evaluates, asked once it answers. */
async function otelModulesEvaluated(counted: string, runtimeArgs: string[], endpoint: string): Promise<number> {
  const child = spawn(process.execPath, [...RUNTIME_NODE_FLAGS, counted, ...runtimeArgs], { cwd: ROOT, stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, OTEL_EXPORTER_OTLP_ENDPOINT: endpoint } });
  try {
    let out = "";
    child.stdout!.on("data", (d) => (out += d));
    const url = await until(() => /listening on (http:\/\/\S+)/.exec(out)?.[1]);
    await fetch(`${url}/health`).then((r) => r.arrayBuffer());
    child.kill("SIGUSR2");
    return Number(await until(() => /otel-modules (\d+)/.exec(out)?.[1]));
  } finally {
    child.kill("SIGKILL");
  }
}

async function until<T>(f: () => T | undefined): Promise<T> {
  for (let i = 0; i < 3000; i++) {
    const v = f();
    if (v !== undefined) return v;
    await sleep(10);
  }
  throw new Error("runtime did not answer in 30 s");
}

/** 100 MB of random data (incompressible: what gzip cannot shrink) written and read through the
 * SDK against the same bytes written and read with `fs` in this process, interleaved in rounds.
 * Ratios are floor time over SDK time (throughput relative to the floor: higher is better). */
async function transfers(sbx: Sandbox, pid: number): Promise<Figures> {
  const size = 100 * 1024 * 1024;
  const data = randomFillSync(new Uint8Array(size));
  const path = `/tmp/runtime-bench-${process.pid}.bin`;
  const floorPath = `/tmp/runtime-bench-floor-${process.pid}.bin`;
  const w: number[] = [], ws: number[] = [], r: number[] = [], wFloor: number[] = [], rFloor: number[] = [], build: number[] = [];
  // CPU per side too (this process's, which runs the SDK, plus the runtime's): on a machine busy
  // with others' work the wall-clock ratio is mostly how long each side waited for a core.
  const cpu = { w: [] as number[], r: [] as number[], wFloor: [] as number[], rFloor: [] as number[], build: [] as number[] };
  // The runtime's own share of each, apart: the SDK's is not ours to cut.
  const runtimeCpu = new Map<number[], number[]>([[cpu.w, []], [cpu.r, []]]);
  const withCpu = async (into: number[], fn: () => Promise<unknown>): Promise<number> => {
    const c0 = process.cpuUsage();
    const s0 = cpuMs(pid);
    const ms = await timed(fn);
    const c = process.cpuUsage(c0);
    const server = cpuMs(pid) - s0;
    into.push((c.user + c.system) / 1000 + server);
    runtimeCpu.get(into)?.push(server);
    return ms;
  };
  const rounds = Number(process.env.RUNTIME_BENCH_IO_ROUNDS ?? 5);
  for (let i = 0; i < rounds; i++) {
    wFloor.push(await withCpu(cpu.wFloor, () => writeFile(floorPath, data)));
    w.push(await withCpu(cpu.w, () => sbx.files.write(path, data.buffer)));
    // The SDK's own share of that write, alone: the multipart body it builds (a Blob of the data in
    // a FormData, encoded by undici as fetch encodes it), with no sending and no runtime.
    build.push(await withCpu(cpu.build, () => sdkMultipartBody(data.buffer, path)));
    ws.push(await timed(() => sbx.files.write(path, new Blob([data]).stream())));
    rFloor.push(await withCpu(cpu.rFloor, async () => void (await readFile(floorPath))));
    let got = 0;
    r.push(await withCpu(cpu.r, async () => {
      got = (await sbx.files.read(path, { format: "bytes", gzip: true })).byteLength;
    }));
    if (got !== size) throw new Error(`read ${got} bytes, expected ${size}`);
  }
  const peak = rssMB(pid);
  await sbx.files.remove(path);
  rmSync(floorPath, { force: true });
  const ratio = (floor: number[], sdk: number[]) => floor.map((f, i) => f / sdk[i]!);
  const wr = ratio(wFloor, w), wsr = ratio(wFloor, ws), rr = ratio(rFloor, r), ceiling = ratio(wFloor, build);
  // The most write_100mb_ratio could be if sending and the runtime cost nothing: fs over the SDK's
  // multipart build alone. Below the target, that build is the floor that stops it.
  const stopped = median(ceiling) < 0.1 ? `; out of reach: the SDK's multipart build alone allows ${r2(median(ceiling))}` : "";
  return {
    "runtime.write_100mb_ratio": { value: median(wr), unit: `x fs (multipart, the SDK's default; median of ${rounds} rounds)`, target: `>= 0.10 (ceiling: write_100mb_sdk_multipart_ceiling${stopped})`, spread: minMax(wr) },
    "runtime.write_100mb_sdk_multipart_ceiling": { value: median(ceiling), unit: "x fs (fs write over the SDK's multipart body build alone, same rounds)", spread: minMax(ceiling) },
    "runtime.write_100mb_of_it_sdk_multipart_build": { value: r2(median(build.map((b, i) => b / w[i]!))), unit: "share of the SDK write's time spent building its multipart body" },
    "runtime.sdk_multipart_build_100mb_ms": { value: r2(median(build)), unit: "ms", spread: minMax(build) },
    "runtime.sdk_multipart_build_100mb_cpu_ms": { value: r2(median(cpu.build)), unit: "ms CPU (this process)" },
    "runtime.write_100mb_octet_stream_ratio": { value: median(wsr), unit: "x fs (a stream, octet-stream)", spread: minMax(wsr) },
    "runtime.read_100mb_gzip_ratio": { value: median(rr), unit: "x fs (gzip: true)", target: ">= 0.05", spread: minMax(rr) },
    "runtime.write_100mb_runtime_cpu_ms": { value: r2(median(runtimeCpu.get(cpu.w)!)), unit: "ms CPU of the runtime per 100 MB multipart write (the rest of write_100mb_cpu_ratio's is the SDK's)", spread: minMax(runtimeCpu.get(cpu.w)!) },
    "runtime.read_100mb_gzip_runtime_cpu_ms": { value: r2(median(runtimeCpu.get(cpu.r)!)), unit: "ms CPU of the runtime per 100 MB gzip read", spread: minMax(runtimeCpu.get(cpu.r)!) },
    "runtime.write_100mb_cpu_ratio": { value: median(cpu.wFloor) / median(cpu.w), unit: "x (fs CPU over SDK + runtime CPU)" },
    "runtime.read_100mb_gzip_cpu_ratio": { value: median(cpu.rFloor) / median(cpu.r), unit: "x (fs CPU over SDK + runtime CPU)" },
    "runtime.write_100mb_multipart_mb_s": { value: 100 / (median(w) / 1000), unit: "MB/s" },
    "runtime.write_100mb_octet_stream_mb_s": { value: 100 / (median(ws) / 1000), unit: "MB/s" },
    "runtime.read_100mb_gzip_mb_s": { value: 100 / (median(r) / 1000), unit: "MB/s" },
    "runtime.fs_write_100mb_mb_s": { value: 100 / (median(wFloor) / 1000), unit: "MB/s" },
    "runtime.fs_read_100mb_mb_s": { value: 100 / (median(rFloor) / 1000), unit: "MB/s" },
    "runtime.rss_after_100mb_transfers_mb": { value: peak, unit: "MB" },
  };
}

/** What `files.write(path, data)` builds before sending, as the e2b SDK builds it (its
 * `toBlob` + FormData), encoded to bytes by undici's body extraction, the one fetch uses. */
async function sdkMultipartBody(data: ArrayBuffer, path: string): Promise<number> {
  const form = new FormData();
  form.append("file", new Blob([data]), path);
  return (await new Response(form).arrayBuffer()).byteLength;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  for (const [name, f] of Object.entries(await run())) console.log(`${name.padEnd(42)} ${f.value.toFixed(2).padStart(10)} ${f.unit}${f.spread ? ` [${f.spread.join("-")}]` : ""}`);
}
