// Same-run baselines for the edge bench (bench/edge.ts), served by the same workerd binary on the
// same machine and driven by the same closed-loop clients as our create:
//   empty     a Worker that answers at once: what workerd's HTTP path alone allows
//   skeleton  the irreducible work of a create in our architecture (bench/skeleton/worker.js):
//             key check, pool pop (SQLite), group insert (SQLite), cluster outbox row (SQLite)
//             plus one WebSocket frame to a client that answers it, the response
//   features  the skeleton plus the work the issues require of every create, in the plainest way
//             (bench/skeleton/feature-worker.js): zod-validated body, HMAC key check (memoised),
//             the template through a per-isolate cache (its own table, `skeleton_templates`), the
//             team's quota object (every limit checked, reservation row, hand to the group: one
//             object call from the Worker), the pool's refill routed back to the pool, the group
//             recording Running with its timeout alarm, the agent's answer awaited with a bound,
//             the index row committed in sqld (its own table, `skeleton_sandboxes`, shaped by the
//             migrations' `sandboxes`) before the response, an envdAccessToken, the request id
//             and metrics (since session 28: the list is in feature-worker.js's header)
// If the skeletons cannot reach a throughput here, no implementation of our design can; the ratio
// of our rate to theirs says how much of the cost is ours.
// Measured November 2026, before session 28 added the later issues' per-create work to the feature
// skeleton (docs/ARCHITECTURE.md, "What the targets need", has the figures since; shared machine, interleaved rounds): workerd CPU per create bare ~0.8 ms,
// features ~0.95-1.1 ms, ours ~1.5-1.6 ms; the bench's own clients and agent take ~0.47 ms of the
// two cores per create and sqld ~0.18 ms. Removing one feature at a time from the feature
// skeleton: index row ~0.2 ms, refill ~0.11, Running ~0.07, memoised HMAC and zod ~0.03 each.
// The bare skeleton sends a frame per create while the feature skeleton batches them (as ours),
// so features minus bare understates what the features cost.
import { copyFileSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { createClient } from "@libsql/client";
import { build } from "esbuild";
import WebSocket from "ws";
import { startService } from "../scripts/lib/service.ts";
import { freePort } from "../scripts/lib/sqld.ts";
import { cpuMs, timedConcurrently } from "./stats.ts";

const ROOT = resolve(import.meta.dirname, "..");
const KEY = `e2b_${"5".repeat(40)}`;
const PEPPER = "skeleton-pepper";
/** Warm members of the feature skeleton's pool, as edge.ts gives ours (its refill keeps them). */
const WARM_REPLICAS = 600;

export interface Phase {
  /** Requests per second over the whole phase. */
  perSecond: number;
  /** workerd CPU time (user + system) per request, ms. */
  cpuMs: number;
  latencies: number[];
}

export interface Skeleton {
  /** `total` requests of the empty Worker from `clients` closed-loop clients. */
  empty(total: number, clients: number): Promise<Phase>;
  /** `total` skeleton creates from `clients` closed-loop clients (stock is filled first). */
  creates(total: number, clients: number): Promise<Phase>;
  /** `total` feature-skeleton creates from `clients` closed-loop clients (a refilled warm pool). */
  features(total: number, clients: number): Promise<Phase>;
  /** One more round of feature-skeleton creates on the pool `features` filled (no fill, no warm-up). */
  featureRound(total: number, clients: number): Promise<Phase>;
  /** The feature skeleton's work in the one-round-trip design (FeatureShard): fills its pool and
   * warms up on the first call (`fill`), then one round. */
  oneTripRound(total: number, clients: number, fill?: boolean, quotaPerCreate?: boolean): Promise<Phase>;
  /** The same work in the one-trip design that keeps the sandbox in its group (FeatureClaimGroup,
   * FeatureLeasePool: notes s17-claim): fills and warms up on the first call (`fill`), then one round. */
  groupTripRound(total: number, clients: number, fill?: boolean): Promise<Phase>;
  stop(): Promise<void>;
}

/** `libsqlUrl`: the sqld the feature skeleton writes its index rows to. `inspectorPort`: serve
 * the DevTools protocol there (one target per service: "features" is the feature skeleton's). */
export async function startSkeleton(dir: string, libsqlUrl: string, opts: { inspectorPort?: number } = {}): Promise<Skeleton> {
  mkdirSync(join(dir, "do-storage"), { recursive: true });
  const [port, emptyPort, featurePort] = [await freePort(), await freePort(), await freePort()];
  const configPath = join(dir, "skeleton.capnp");
  // Embeds are relative to the config file.
  copyFileSync(join(import.meta.dirname, "skeleton/worker.js"), join(dir, "worker.js"));
  await bundleFeatureWorker(join(dir, "feature.js"));
  await createIndexTable(libsqlUrl);
  writeFileSync(configPath, config(dir, { port, emptyPort, featurePort, libsqlUrl }));
  const workerd = await startService({
    name: "workerd (skeleton)",
    bin: join(ROOT, "node_modules/.bin/workerd"),
    args: ["serve", configPath, ...(opts.inspectorPort ? [`--inspector-addr=127.0.0.1:${opts.inspectorPort}`] : [])],
    url: `http://127.0.0.1:${port}`,
    logFile: join(dir, "workerd.log"),
    readyWithinMs: 20_000,
  });
  const agents: WebSocket[] = [];
  try {
    agents.push(await answeringClient(`ws://127.0.0.1:${port}/connect`));
    agents.push(await answeringClient(`ws://127.0.0.1:${featurePort}/connect`));
  } catch (err) {
    for (const a of agents) a.close();
    await workerd.stop();
    throw err;
  }
  const base = `http://127.0.0.1:${port}`;
  const headers = { "x-api-key": KEY, "content-type": "application/json" };

  async function phase(total: number, clients: number, request: () => Promise<Response>, want: number): Promise<Phase> {
    const cpuBefore = cpuMs(workerd.pid);
    const started = performance.now();
    const latencies = await timedConcurrently(total, clients, async () => {
      const res = await request();
      const text = await res.text();
      if (res.status !== want) throw new Error(`skeleton: HTTP ${res.status} ${text.slice(0, 200)}`);
    });
    const seconds = (performance.now() - started) / 1000;
    return { perSecond: total / seconds, cpuMs: (cpuMs(workerd.pid) - cpuBefore) / total, latencies };
  }

  const createBody = JSON.stringify({ templateID: "bench-warm", timeout: 3600 });
  const create = () => fetch(`${base}/sandboxes`, { method: "POST", headers, body: createBody });
  const empty = () => fetch(`http://127.0.0.1:${emptyPort}/sandboxes`, { method: "POST", headers, body: createBody });
  const featureBase = `http://127.0.0.1:${featurePort}`;
  const featureCreate = () => fetch(`${featureBase}/sandboxes`, { method: "POST", headers, body: createBody });
  const groupTripCreate = () => fetch(`${featureBase}/group-trip/sandboxes`, { method: "POST", headers, body: createBody });
  const oneTripCreate = (perCreate: boolean) => () => fetch(`${featureBase}/one-trip/sandboxes${perCreate ? "/quota-per-create" : ""}`, { method: "POST", headers, body: createBody });
  return {
    async empty(total, clients) {
      await phase(Math.min(total, 500), clients, empty, 200); // JIT
      return phase(total, clients, empty, 200);
    },
    async creates(total, clients) {
      const warmup = Math.min(total, 500);
      const fill = await fetch(`${base}/fill`, { method: "POST", headers, body: JSON.stringify({ templateID: "bench-warm", count: total + warmup }) });
      if (!fill.ok) throw new Error(`skeleton fill: HTTP ${fill.status} ${await fill.text()}`);
      await phase(warmup, clients, create, 201);
      return phase(total, clients, create, 201);
    },
    async features(total, clients) {
      const fill = await fetch(`${featureBase}/fill`, { method: "POST", headers, body: JSON.stringify({ templateID: "bench-warm", count: WARM_REPLICAS }) });
      if (!fill.ok) throw new Error(`feature skeleton fill: HTTP ${fill.status} ${await fill.text()}`);
      await phase(Math.min(total, 500), clients, featureCreate, 201);
      return phase(total, clients, featureCreate, 201);
    },
    featureRound: (total, clients) => phase(total, clients, featureCreate, 201),
    async oneTripRound(total, clients, fill = false, quotaPerCreate = false) {
      if (fill) {
        const res = await fetch(`${featureBase}/one-trip/fill`, { method: "POST", headers, body: JSON.stringify({ templateID: "bench-warm", count: WARM_REPLICAS }) });
        if (!res.ok) throw new Error(`one-trip skeleton fill: HTTP ${res.status} ${await res.text()}`);
        await phase(Math.min(total, 500), clients, oneTripCreate(false), 201);
      }
      return phase(total, clients, oneTripCreate(quotaPerCreate), 201);
    },
    async groupTripRound(total, clients, fill = false) {
      if (fill) {
        const res = await fetch(`${featureBase}/group-trip/fill`, { method: "POST", headers, body: JSON.stringify({ templateID: "bench-warm", count: WARM_REPLICAS }) });
        if (!res.ok) throw new Error(`group-trip skeleton fill: HTTP ${res.status} ${await res.text()}`);
        await phase(Math.min(total, 500), clients, groupTripCreate, 201);
      }
      return phase(total, clients, groupTripCreate, 201);
    },
    async stop() {
      for (const a of agents) a.close();
      await workerd.stop();
    },
  };
}

/** What the skeletons' agent reads of a feature-skeleton intent. */
interface FeatureIntent {
  sandboxId: string;
  generation: number;
  owner: { kind: string };
}

/**
 * The skeletons' agent: answers every frame as soon as it arrives, with its seq (bare skeleton)
 * or, for all the intents of a frame, one protocol ack frame with their observations (feature skeleton).
 */
async function answeringClient(url: string): Promise<WebSocket> {
  const ws = new WebSocket(url, { perMessageDeflate: false });
  await new Promise((ok, fail) => {
    ws.once("open", ok);
    ws.once("error", fail);
  });
  ws.on("message", (data) => {
    const msg = JSON.parse(String(data)) as { seq: number } | { items: { seq: number; intent: FeatureIntent }[] } | { type: "teamSets" };
    if ("items" in msg) {
      // The protocol's ack frame with the observations made with the acks (schema/protocol), as our
      // agent sends them: a pool's new member acked `accepted` and observed Running, a claimed one
      // (re-initialised before its ack) acked `applied`.
      const observedAt = Date.now();
      const items = msg.items.map(({ seq, intent: i }) => ({ seq, sandboxId: i.sandboxId, generation: i.generation, result: i.owner.kind === "sandbox" ? "applied" : "accepted" }));
      const observations = msg.items.map(({ intent: i }) => ({ sandboxId: i.sandboxId, generation: i.generation, phase: "Running", ready: true, endpoint: { runtime: `http://${i.sandboxId}.skeleton.invalid:49983` }, observedAt }));
      ws.send(JSON.stringify({ type: "ack", items, observations }));
    } else if ("seq" in msg) ws.send(JSON.stringify({ seq: msg.seq, result: "applied" }));
    // A team's policy and profile sets (feature skeleton): held, not answered.
  });
  return ws;
}

/** The feature skeleton as one module: its zod and the project's body schema bundled in. */
async function bundleFeatureWorker(outfile: string): Promise<void> {
  await build({
    entryPoints: [join(import.meta.dirname, "skeleton/feature-worker.js")],
    outfile,
    bundle: true,
    format: "esm",
    platform: "neutral",
    conditions: ["workerd", "worker", "browser"],
    mainFields: ["module", "main"],
    external: ["cloudflare:workers"],
    logLevel: "warning",
  });
}

/** The feature skeleton's index table: the migrations' `sandboxes` (columns and indexes), renamed. */
async function createIndexTable(libsqlUrl: string): Promise<void> {
  const dir = join(ROOT, "schema/db/migrations");
  const statements = readdirSync(dir)
    .filter((f) => f.endsWith(".sql"))
    .sort()
    .flatMap((f) => readFileSync(join(dir, f), "utf8").split("--> statement-breakpoint"))
    .filter((st) => /(TABLE|ON) `sandboxes`/.test(st))
    .map((st) => st.replaceAll("`sandboxes", "`skeleton_sandboxes").replace(/^CREATE (TABLE|INDEX) /m, "CREATE $1 IF NOT EXISTS "));
  if (!statements.some((st) => st.includes("CREATE TABLE"))) throw new Error("skeleton: no `sandboxes` table in schema/db/migrations");
  // The feature skeleton's templates: what a create reads of one (its fill writes it).
  statements.push(
    "CREATE TABLE IF NOT EXISTS skeleton_templates (team_id TEXT NOT NULL, id TEXT NOT NULL, cpu_count INTEGER NOT NULL, memory_mb INTEGER NOT NULL, disk_size_mb INTEGER NOT NULL, envd_version TEXT NOT NULL, PRIMARY KEY (team_id, id));",
  );
  const db = createClient({ url: libsqlUrl });
  try {
    await db.executeMultiple(statements.join("\n"));
  } finally {
    db.close();
  }
}

function config(dir: string, p: { port: number; emptyPort: number; featurePort: number; libsqlUrl: string }): string {
  const date = /^compatibility_date\s*=\s*"([^"]+)"/m.exec(readFileSync(join(ROOT, "wrangler.toml"), "utf8"))?.[1] ?? "2026-11-01";
  const s = JSON.stringify;
  const ns = (className: string) => `(className = ${s(className)}, uniqueKey = ${s(`skeleton-${className}`)}, enableSql = true)`;
  return `using Workerd = import "/workerd/workerd.capnp";

const config :Workerd.Config = (
  services = [
    (name = "skeleton", worker = .skeleton),
    (name = "empty", worker = .empty),
    (name = "features", worker = .features),
    (name = "do-storage", disk = (path = ${s(join(dir, "do-storage"))}, writable = true)),
    # sqld listens on loopback; the default outbound allows public addresses only.
    (name = "loopback", network = (allow = ["private", "local"])),
  ],
  sockets = [
    (name = "http", address = ${s(`127.0.0.1:${p.port}`)}, http = (), service = "skeleton"),
    (name = "empty", address = ${s(`127.0.0.1:${p.emptyPort}`)}, http = (), service = "empty"),
    (name = "features", address = ${s(`127.0.0.1:${p.featurePort}`)}, http = (), service = "features"),
  ],
);

const skeleton :Workerd.Worker = (
  compatibilityDate = ${s(date)},
  modules = [(name = "worker.js", esModule = embed "worker.js")],
  bindings = [
    (name = "API_KEY", text = ${s(KEY)}),
    (name = "POOL", durableObjectNamespace = "SkeletonPool"),
    (name = "GROUP", durableObjectNamespace = "SkeletonGroup"),
    (name = "CLUSTER", durableObjectNamespace = "SkeletonCluster"),
  ],
  durableObjectNamespaces = [${["SkeletonPool", "SkeletonGroup", "SkeletonCluster"].map(ns).join(", ")}],
  durableObjectStorage = (localDisk = "do-storage"),
);

const features :Workerd.Worker = (
  compatibilityDate = ${s(date)},
  modules = [(name = "feature.js", esModule = embed "feature.js")],
  bindings = [
    (name = "ADMIN_API_KEY", text = ${s(KEY)}),
    (name = "KEY_PEPPER", text = ${s(PEPPER)}),
    (name = "LIBSQL_URL", text = ${s(p.libsqlUrl)}),
    (name = "POOL", durableObjectNamespace = "FeaturePool"),
    (name = "GROUP", durableObjectNamespace = "FeatureGroup"),
    (name = "CLUSTER", durableObjectNamespace = "FeatureCluster"),
    (name = "QUOTA", durableObjectNamespace = "FeatureQuota"),
    (name = "LEDGER", durableObjectNamespace = "FeatureLedger"),
    (name = "SHARD", durableObjectNamespace = "FeatureShard"),
    (name = "LPOOL", durableObjectNamespace = "FeatureLeasePool"),
    (name = "CLAIMGROUP", durableObjectNamespace = "FeatureClaimGroup"),
    (name = "METRICS", durableObjectNamespace = "FeatureMetrics"),
  ],
  durableObjectNamespaces = [${["FeaturePool", "FeatureGroup", "FeatureCluster", "FeatureQuota", "FeatureLedger", "FeatureShard", "FeatureLeasePool", "FeatureClaimGroup", "FeatureMetrics"].map(ns).join(", ")}],
  durableObjectStorage = (localDisk = "do-storage"),
  globalOutbound = "loopback",
);

const empty :Workerd.Worker = (
  compatibilityDate = ${s(date)},
  modules = [(name = "empty.js", esModule = "export default { fetch() { return new Response('{}', { headers: { 'content-type': 'application/json' } }); } };")],
);
`;
}
