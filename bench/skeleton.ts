// Same-run baselines for the edge bench (bench/edge.ts), served by the same workerd binary on the
// same machine and driven by the same closed-loop clients as our create:
//   empty     a Worker that answers at once: what workerd's HTTP path alone allows
//   skeleton  the irreducible work of a create in our architecture (bench/skeleton/worker.js):
//             key check, pool pop (SQLite), group insert (SQLite), cluster outbox row (SQLite)
//             plus one WebSocket frame to a client that answers it, the response
// If the skeleton cannot reach a throughput here, no implementation of our design can; the ratio
// of our rate to the skeleton's says how much of the cost is ours.
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import WebSocket from "ws";
import { startService } from "../scripts/lib/service.ts";
import { freePort } from "../scripts/lib/sqld.ts";
import { cpuMs, timedConcurrently } from "./stats.ts";

const ROOT = resolve(import.meta.dirname, "..");
const KEY = `e2b_${"5".repeat(40)}`;

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
  stop(): Promise<void>;
}

export async function startSkeleton(dir: string): Promise<Skeleton> {
  mkdirSync(join(dir, "do-storage"), { recursive: true });
  const [port, emptyPort] = [await freePort(), await freePort()];
  const configPath = join(dir, "skeleton.capnp");
  // Embeds are relative to the config file.
  copyFileSync(join(import.meta.dirname, "skeleton/worker.js"), join(dir, "worker.js"));
  writeFileSync(configPath, config(dir, port, emptyPort));
  const workerd = await startService({
    name: "workerd (skeleton)",
    bin: join(ROOT, "node_modules/.bin/workerd"),
    args: ["serve", configPath],
    url: `http://127.0.0.1:${port}`,
    logFile: join(dir, "workerd.log"),
    readyWithinMs: 20_000,
  });
  const agent = await answeringClient(`ws://127.0.0.1:${port}/connect`).catch(async (err: unknown) => {
    await workerd.stop();
    throw err;
  });
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
    async stop() {
      agent.close();
      await workerd.stop();
    },
  };
}

/** The skeleton's agent: answers every frame with its seq, as soon as it arrives. */
async function answeringClient(url: string): Promise<WebSocket> {
  const ws = new WebSocket(url, { perMessageDeflate: false });
  await new Promise((ok, fail) => {
    ws.once("open", ok);
    ws.once("error", fail);
  });
  ws.on("message", (data) => {
    const { seq } = JSON.parse(String(data)) as { seq: number };
    ws.send(JSON.stringify({ seq, result: "applied" }));
  });
  return ws;
}

function config(dir: string, port: number, emptyPort: number): string {
  const date = /^compatibility_date\s*=\s*"([^"]+)"/m.exec(readFileSync(join(ROOT, "wrangler.toml"), "utf8"))?.[1] ?? "2026-11-01";
  const s = JSON.stringify;
  const ns = (className: string) => `(className = ${s(className)}, uniqueKey = ${s(`skeleton-${className}`)}, enableSql = true)`;
  return `using Workerd = import "/workerd/workerd.capnp";

const config :Workerd.Config = (
  services = [
    (name = "skeleton", worker = .skeleton),
    (name = "empty", worker = .empty),
    (name = "do-storage", disk = (path = ${s(join(dir, "do-storage"))}, writable = true)),
  ],
  sockets = [
    (name = "http", address = ${s(`127.0.0.1:${port}`)}, http = (), service = "skeleton"),
    (name = "empty", address = ${s(`127.0.0.1:${emptyPort}`)}, http = (), service = "empty"),
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

const empty :Workerd.Worker = (
  compatibilityDate = ${s(date)},
  modules = [(name = "empty.js", esModule = "export default { fetch() { return new Response('{}', { headers: { 'content-type': 'application/json' } }); } };")],
);
`;
}
