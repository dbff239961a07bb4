// The edge's data-plane gateway alone, no root needed: `node bench/gateway.ts` prints JSON.
// A Node HTTP server stands in for the agent's ingress and answers every Connect server stream
// the way the runtime answers `commands.run('true')` (a start event, an end event, the end-stream
// envelope; the payloads are opaque to the gateway), and a scripted agent names it as its cluster's
// ingress. The same requests (E2b-Sandbox-Id, X-Access-Token, a Connect body) go, in alternating
// rounds, through
//   gateway  our edge: the sandbox's route from its group, the token check, the ingress signature,
//            the fetch, the Connect guard re-framing the stream
//   bare     a Worker that only forwards the request to the same server and streams the answer
//            back (a bare workerd fetch: the floor of any gateway on workerd)
//   routed   the same plus one Durable Object RPC per request for the sandbox's route (the floor
//            of a gateway whose tokens and states live in Durable Objects, as ours do)
// and the figures are workerd CPU per request, each side's, and the ratios to the floors:
//   gateway.edge_cpu_ms_per_cmd, gateway.bare_fetch_cpu_ms_per_cmd, gateway.routed_fetch_cpu_ms_per_cmd,
//   gateway.cpu_vs_bare_fetch_ratio, gateway.cpu_vs_routed_fetch_ratio
// GATEWAY_BENCH_BASE=<git rev> adds that revision's edge as a third side (built from `git archive`,
// the checkout untouched) and prints gateway.tree_vs_base_cpu_ratio: a cut's effect, same run.
// GATEWAY_BENCH_PROFILE=<file.cpuprofile> records a V8 profile of the edge over the gateway rounds
// (it adds CPU: take that run's figures as a profile only).
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { buildEdge, startEdge } from "../scripts/lib/edge.ts";
import { startService } from "../scripts/lib/service.ts";
import { freePort, startSqld } from "../scripts/lib/sqld.ts";
import { migrate } from "../scripts/migrate.ts";
import { seed } from "../scripts/seed.ts";
import { ScriptedAgent, tcpTransport } from "../test/support/scripted-agent.ts";
import { cpuMs, median } from "./stats.ts";
import { startProfiler } from "./v8-profile.ts";
import type { Figures } from "./run.ts";

const ROOT = resolve(import.meta.dirname, "..");
const ADMIN_KEY = `e2b_${"0".repeat(38)}9a`;
const CLUSTER_TOKEN = "gateway-bench-cluster-token";
const ROUNDS = Number(process.env.GATEWAY_BENCH_ROUNDS ?? 6);
const PER_ROUND = Number(process.env.GATEWAY_BENCH_REQUESTS ?? 400);
const CLIENTS = 4;

/** A sandbox of a template of its own on the edge at `url`, and the headers its commands carry. */
async function sandboxHeaders(url: string): Promise<Record<string, string>> {
  const admin = { "x-api-key": ADMIN_KEY, "content-type": "application/json" };
  const put = await fetch(`${url}/admin/teams/admin/templates/gw`, { method: "PUT", headers: admin, body: JSON.stringify({ spec: { replicas: 1 } }) });
  if (!put.ok) throw new Error(`template: HTTP ${put.status} ${await put.text()}`);
  const created = await fetch(`${url}/sandboxes`, { method: "POST", headers: admin, body: JSON.stringify({ templateID: "gw", timeout: 3600 }) });
  const sbx = (await created.json()) as { sandboxID: string; envdAccessToken: string };
  if (created.status !== 201) throw new Error(`create: HTTP ${created.status} ${JSON.stringify(sbx)}`);
  return { "e2b-sandbox-id": sbx.sandboxID, "x-access-token": sbx.envdAccessToken, "content-type": "application/connect+proto", "connect-protocol-version": "1" };
}

function envelope(flags: number, payload: Uint8Array): Buffer {
  const out = Buffer.alloc(5 + payload.length);
  out[0] = flags;
  out.writeUInt32BE(payload.length, 1);
  out.set(payload, 5);
  return out;
}

/** What the runtime streams for `run('true')`: sizes as its protobuf events are (start ~10 B, end ~20 B). */
const STREAM = Buffer.concat([envelope(0, new Uint8Array(12).fill(1)), envelope(0, new Uint8Array(24).fill(2)), envelope(2, new TextEncoder().encode("{}"))]);

function startIngress(): Promise<Server> {
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      if (req.method === "HEAD") return res.end();
      res.writeHead(200, { "content-type": "application/connect+proto" });
      res.end(STREAM);
    });
  });
  server.keepAliveTimeout = 60_000;
  return new Promise((ok) => server.listen(0, "127.0.0.1", () => ok(server)));
}

/**
 * Two floors in one workerd: `bare` forwards every request to `ingress` and streams the answer
 * back; `routed` first asks a Durable Object for the sandbox's route (one RPC, as the gateway must:
 * the token and state live in the sandbox's group), then forwards.
 */
async function startFloors(dir: string, ingress: string) {
  const [port, routedPort] = [await freePort(), await freePort()];
  const date = /^compatibility_date\s*=\s*"([^"]+)"/m.exec(readFileSync(join(ROOT, "wrangler.toml"), "utf8"))?.[1] ?? "2026-11-01";
  const forward = `const u = new URL(req.url); const res = await fetch(${JSON.stringify(ingress)} + u.pathname + u.search, { method: req.method, headers: req.headers, body: req.body }); return new Response(res.body, res);`;
  const bare = `export default { async fetch(req) { ${forward} } };`;
  const routed = `import { DurableObject } from "cloudflare:workers";
export class Route extends DurableObject { route(id) { return { ok: true, route: { sandboxId: id, envdAccessToken: null, phase: "Running", cluster: "local" } }; } }
export default { async fetch(req, env) { const id = req.headers.get("e2b-sandbox-id"); const r = await env.ROUTE.get(env.ROUTE.idFromName(id.slice(0, 1))).route(id); if (!r.ok) return new Response(null, { status: 502 }); ${forward} } };`;
  const config = `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [(name = "bare", worker = .bare), (name = "routed", worker = .routed), (name = "loopback", network = (allow = ["private", "local"]))],
  sockets = [
    (name = "http", address = ${JSON.stringify(`127.0.0.1:${port}`)}, http = (), service = "bare"),
    (name = "routed", address = ${JSON.stringify(`127.0.0.1:${routedPort}`)}, http = (), service = "routed"),
  ],
);
const bare :Workerd.Worker = (
  compatibilityDate = ${JSON.stringify(date)},
  modules = [(name = "bare.js", esModule = ${JSON.stringify(bare)})],
  globalOutbound = "loopback",
);
const routed :Workerd.Worker = (
  compatibilityDate = ${JSON.stringify(date)},
  modules = [(name = "routed.js", esModule = ${JSON.stringify(routed)})],
  bindings = [(name = "ROUTE", durableObjectNamespace = "Route")],
  durableObjectNamespaces = [(className = "Route", uniqueKey = "gateway-bench-route")],
  durableObjectStorage = (inMemory = void),
  globalOutbound = "loopback",
);
`;
  writeFileSync(join(dir, "floors.capnp"), config);
  const service = await startService({ name: "workerd (floors)", bin: join(ROOT, "node_modules/.bin/workerd"), args: ["serve", join(dir, "floors.capnp")], url: `http://127.0.0.1:${port}`, logFile: join(dir, "floors.log"), readyWithinMs: 20_000 });
  return { ...service, routedUrl: `http://127.0.0.1:${routedPort}` };
}

/** `n` requests from CLIENTS closed-loop clients; each answer read whole and checked. */
async function commands(url: string, headers: Record<string, string>, n: number): Promise<void> {
  let next = 0;
  const body = new Uint8Array(envelope(0, new Uint8Array(40).fill(3)));
  await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      while (next++ < n) {
        const res = await fetch(`${url}/process.Process/Start`, { method: "POST", headers, body });
        const got = Buffer.from(await res.arrayBuffer());
        if (res.status !== 200 || !got.equals(STREAM)) throw new Error(`gateway bench: HTTP ${res.status}, ${got.length} bytes`);
      }
    }),
  );
}

export async function run(): Promise<Figures> {
  const shm = existsSync("/dev/shm") ? "/dev/shm" : tmpdir();
  const dir = mkdtempSync(join(shm, "sbx-gateway-bench-"));
  const ingress = await startIngress();
  const ingressUrl = `http://127.0.0.1:${(ingress.address() as AddressInfo).port}`;
  const sqld = await startSqld({ dir: join(dir, "sqld") });
  const stops: (() => unknown)[] = [() => ingress.close(), () => sqld.stop()];
  try {
    await migrate(sqld.url);
    await seed({ libsqlUrl: sqld.url, adminApiKey: ADMIN_KEY, pepper: "gateway-pepper", baseReplicas: 0 });
    const profileFile = process.env.GATEWAY_BENCH_PROFILE;
    const vars = { LIBSQL_URL: sqld.url, KEY_PEPPER: "gateway-pepper", ADMIN_API_KEY: ADMIN_KEY, CLUSTER_TOKEN };
    const gateways: { name: string; url: string; pid: number; headers: Record<string, string>; cpu: number[] }[] = [];
    const add = async (name: string, dirName: string, opts: { inspectorPort?: number; bundleFrom?: string }) => {
      if (opts.bundleFrom) buildEdge(join(dir, dirName, "bundle"), opts.bundleFrom);
      const edge = await startEdge({ dir: join(dir, dirName), vars, inspectorPort: opts.inspectorPort, skipBuild: Boolean(opts.bundleFrom) });
      stops.push(() => edge.stop());
      const agent = new ScriptedAgent({ agentId: `gateway-bench-${dirName}`, ingressUrl });
      await agent.connect(tcpTransport(edge.url, CLUSTER_TOKEN, "local"));
      stops.push(() => agent.disconnect());
      gateways.push({ name, url: edge.url, pid: edge.pid, headers: await sandboxHeaders(edge.url), cpu: [] });
    };
    const inspectorPort = profileFile ? await freePort() : undefined;
    await add("gateway", "edge", { inspectorPort });
    const baseRev = process.env.GATEWAY_BENCH_BASE;
    if (baseRev) {
      const tree = join(dir, "base-tree");
      mkdirSync(tree);
      const archive = spawnSync("sh", ["-c", `git archive ${JSON.stringify(baseRev)} | tar -x -C ${JSON.stringify(tree)}`], { cwd: ROOT, encoding: "utf8" });
      if (archive.status !== 0) throw new Error(`git archive ${baseRev}: ${archive.stderr}`);
      symlinkSync(join(ROOT, "node_modules"), join(tree, "node_modules"));
      await add(`base ${baseRev}`, "edge-base", { bundleFrom: tree });
    }
    const floors = await startFloors(dir, ingressUrl);
    stops.push(() => floors.stop());
    const bareSide = { name: "bare", url: floors.url, pid: floors.pid, headers: gateways[0]!.headers, cpu: [] as number[] };
    const routedSide = { name: "routed", url: floors.routedUrl, pid: floors.pid, headers: gateways[0]!.headers, cpu: [] as number[] };
    const sides = [...gateways, bareSide, routedSide];

    for (const s of sides) await commands(s.url, s.headers, 200); // JIT, caches
    const profiler = inspectorPort ? await startProfiler(inspectorPort) : null;
    for (let r = 0; r < ROUNDS; r++) {
      // Each round in another order, so drift on the shared machine hits every side alike.
      for (const s of sides.map((_, i) => sides[(i + r) % sides.length]!)) {
        const before = cpuMs(s.pid);
        await commands(s.url, s.headers, PER_ROUND);
        s.cpu.push((cpuMs(s.pid) - before) / PER_ROUND);
      }
    }
    if (profiler && profileFile) writeFileSync(profileFile, JSON.stringify(await profiler.stop()));
    for (const s of sides) console.error(`bench gateway: ${s.name} workerd ms per request ${s.cpu.map((x) => x.toFixed(3)).join(" ")}`);
    const cpu = { gateway: gateways[0]!.cpu, bare: bareSide.cpu };
    const figures: Figures = {};
    if (gateways[1]) {
      const vsBase = gateways[0]!.cpu.map((t, i) => t / gateways[1]!.cpu[i]!);
      figures["gateway.tree_vs_base_cpu_ratio"] = { value: Number(median(vsBase).toFixed(3)), unit: "ratio", spread: [Number(Math.min(...vsBase).toFixed(3)), Number(Math.max(...vsBase).toFixed(3))] };
    }
    const ratios = cpu.gateway.map((g, i) => g / cpu.bare[i]!);
    const vsRouted = cpu.gateway.map((g, i) => g / routedSide.cpu[i]!);
    return {
      ...figures,
      "gateway.edge_cpu_ms_per_cmd": { value: Number(median(cpu.gateway).toFixed(3)), unit: "ms" },
      "gateway.bare_fetch_cpu_ms_per_cmd": { value: Number(median(cpu.bare).toFixed(3)), unit: "ms" },
      "gateway.cpu_vs_bare_fetch_ratio": { value: Number(median(ratios).toFixed(2)), unit: "ratio", spread: [Number(Math.min(...ratios).toFixed(2)), Number(Math.max(...ratios).toFixed(2))] },
      "gateway.routed_fetch_cpu_ms_per_cmd": { value: Number(median(routedSide.cpu).toFixed(3)), unit: "ms" },
      "gateway.cpu_vs_routed_fetch_ratio": { value: Number(median(vsRouted).toFixed(2)), unit: "ratio", spread: [Number(Math.min(...vsRouted).toFixed(2)), Number(Math.max(...vsRouted).toFixed(2))] },
    };
  } finally {
    for (const stop of stops.reverse()) await Promise.resolve(stop()).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.main) console.log(JSON.stringify(await run(), null, 2));
