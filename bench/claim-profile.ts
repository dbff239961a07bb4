// `node bench/claim-profile.ts [--rounds n] [--creates n] [--out prefix] [--top n]`: where the
// edge's warm create spends its isolate's CPU beside the feature skeleton's (bench/skeleton.ts),
// both served at once with workerd's inspector and loaded by the same 50 clients in alternating
// rounds. Each round's V8 CPU profile (the product's Worker isolate, the skeleton's "features"
// service) is summed into sampled µs per create by bundled source file (self time, and total with
// callees) and by function, printed side by side with the difference, and written to
// <prefix>.<product|skeleton>.<round>.cpuprofile. workerd runs every isolate and Durable Object of
// a service on one thread, so a profile covers the Worker and all its objects; what it cannot see
// (the runtime's C++ outside a JS call: RPC, SQLite commits, sockets) shows only in the workerd CPU
// per create, printed beside the sampled time. The inspector costs both sides alike: take the CPU
// figures of such a run as a profile only (bench/edge.ts measures the ratio without it).
// Not part of `npm run bench` (it writes no figures): a tool for ranking what to cut.
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { startEdge } from "../scripts/lib/edge.ts";
import { freePort, startSqld } from "../scripts/lib/sqld.ts";
import { migrate } from "../scripts/migrate.ts";
import { seed } from "../scripts/seed.ts";
import { ScriptedAgent, tcpTransport } from "../test/support/scripted-agent.ts";
import { client } from "./edge.ts";
import { startSkeleton } from "./skeleton.ts";
import { cpuMs, median } from "./stats.ts";
import { bundleFiles, selfTimes, startProfiler, type CpuProfile } from "./v8-profile.ts";

const { values: opt } = parseArgs({
  options: {
    rounds: { type: "string", default: "4" },
    creates: { type: "string", default: "1500" },
    out: { type: "string" },
    top: { type: "string", default: "40" },
  },
});
const rounds = Number(opt.rounds);
const creates = Number(opt.creates);
const top = Number(opt.top);
const CLIENTS = 50;
const REPLICAS = 600;
const CLUSTER_TOKEN = "bench-cluster-token";
const ADMIN_KEY = `e2b_${"0".repeat(38)}be`; // bench/edge.ts's `client` sends this key

console.log(`load average ${loadavg().map((x) => x.toFixed(1)).join(" ")} (before)`);
const tmp = mkdtempSync(existsSync("/dev/shm") ? "/dev/shm/sbx-claim-profile-" : "/tmp/sbx-claim-profile-");
const sqld = await startSqld({ dir: join(tmp, "sqld") });
const [edgePort, skeletonPort] = [await freePort(), await freePort()];
type Acc = { self: Map<string, number>; selfByFile: Map<string, number>; total: Map<string, number>; nativeByCaller: Map<string, number>; byKind: Map<string, number>; sampled: number[]; cpu: number[] };
const acc = (): Acc => ({ self: new Map(), selfByFile: new Map(), total: new Map(), nativeByCaller: new Map(), byKind: new Map(), sampled: [], cpu: [] });
const sides = { product: acc(), skeleton: acc() };
let stopAll = async () => {};
try {
  await migrate(sqld.url);
  await seed({ libsqlUrl: sqld.url, adminApiKey: ADMIN_KEY, pepper: "bench-pepper", baseReplicas: 0 });
  const edge = await startEdge({
    dir: join(tmp, "edge"),
    vars: { LIBSQL_URL: sqld.url, KEY_PEPPER: "bench-pepper", ADMIN_API_KEY: ADMIN_KEY, CLUSTER_TOKEN },
    inspectorPort: edgePort,
  });
  const skeleton = await startSkeleton(join(tmp, "skeleton"), sqld.url, { inspectorPort: skeletonPort });
  const agent = new ScriptedAgent({ agentId: "profile-agent" });
  stopAll = async () => {
    agent.disconnect();
    await edge.stop();
    await skeleton.stop();
  };
  await agent.connect(tcpTransport(edge.url, CLUSTER_TOKEN, "local"));
  const api = client(edge.url);
  await api.template("bench-warm", REPLICAS);
  await api.waitAvailable("bench-warm", REPLICAS);
  await api.createMany("bench-warm", 300, CLIENTS); // JIT, objects, caches
  await skeleton.features(500, CLIENTS); // fill and warm-up
  const files = { product: bundleFiles(join(tmp, "edge/bundle/index.js")), skeleton: bundleFiles(join(tmp, "skeleton/feature.js")) };

  const record = async (name: "product" | "skeleton", r: number, profile: CpuProfile, cpuPerCreate: number) => {
    if (opt.out) writeFileSync(`${opt.out}.${name}.${r}.cpuprofile`, JSON.stringify(profile));
    const t = selfTimes(profile, (_url, line) => files[name](line));
    const s = sides[name];
    for (const k of ["self", "selfByFile", "total", "nativeByCaller", "byKind"] as const) for (const [f, us] of t[k]) s[k].set(f, (s[k].get(f) ?? 0) + us / creates);
    s.sampled.push(t.sampled / creates);
    s.cpu.push(cpuPerCreate);
  };
  for (let r = 0; r < rounds; r++) {
    const order: ("product" | "skeleton")[] = r % 2 ? ["skeleton", "product"] : ["product", "skeleton"];
    for (const name of order) {
      if (name === "product") {
        await api.waitAvailable("bench-warm", REPLICAS);
        await new Promise((ok) => setTimeout(ok, 1500)); // the refill's last acks
        const profiler = await startProfiler(edgePort);
        const before = cpuMs(edge.pid);
        await api.createMany("bench-warm", creates, CLIENTS);
        const cpu = (cpuMs(edge.pid) - before) / creates;
        await record(name, r, (await profiler.stop()) as CpuProfile, cpu);
      } else {
        await new Promise((ok) => setTimeout(ok, 1500));
        const profiler = await startProfiler(skeletonPort, "features");
        const phase = await skeleton.featureRound(creates, CLIENTS);
        await record(name, r, (await profiler.stop()) as CpuProfile, phase.cpuMs);
      }
    }
  }
} finally {
  await stopAll();
  await sqld.stop();
  rmSync(tmp, { recursive: true, force: true });
}

const us = (x: number | undefined) => ((x ?? 0) / rounds).toFixed(1).padStart(7);
const { product: p, skeleton: k } = sides;
console.log(`workerd CPU ms per create (with the inspector): product ${p.cpu.map((x) => x.toFixed(2)).join(" ")} (median ${median(p.cpu).toFixed(2)}); skeleton ${k.cpu.map((x) => x.toFixed(2)).join(" ")} (median ${median(k.cpu).toFixed(2)})`);
console.log(`sampled JS-thread µs per create: product ${median(p.sampled).toFixed(0)}, skeleton ${median(k.sampled).toFixed(0)}`);
const table = (title: string, key: "selfByFile" | "total" | "self" | "nativeByCaller" | "byKind") => {
  console.log(`\n${title} (µs per create, mean over rounds): product  skeleton  product−skeleton`);
  const keys = new Set([...p[key].keys(), ...k[key].keys()]);
  const rows = [...keys].map((f) => ({ f, a: p[key].get(f) ?? 0, b: k[key].get(f) ?? 0 })).sort((x, y) => y.a - y.b - (x.a - x.b));
  for (const { f, a, b } of rows.slice(0, top)) console.log(`${us(a)} ${us(b)} ${us(a - b)}  ${f}`);
};
// First the split the other tables cannot give: the two sides share no source file, so their
// rows by file or function never meet; by kind they do (is the excess storage, or JS, or the runtime?).
table("self time by kind", "byKind");
table("self time by file", "selfByFile");
table("total time by file (callees included)", "total");
table("self time by function", "self");
// The runtime's calls (SQLite exec, transactionSync, timers) by the code that made them: where the
// statements' cost shows (the tables above count a native call apart from its caller).
table("native calls by their JS caller", "nativeByCaller");
for (const [name, s] of Object.entries(sides)) {
  console.log(`\n${name}: self time by function, largest first (µs per create)`);
  for (const [f, v] of [...s.self].sort((x, y) => y[1] - x[1]).slice(0, top)) console.log(`${us(v)}  ${f}`);
}
console.log(`load average ${loadavg().map((x) => x.toFixed(1)).join(" ")} (after)`);
