// Runs the edge bundle on plain workerd (the open-source Workers runtime), the way `npm start`
// and the benchmarks serve it. wrangler dev adds two hops and an inspector (~8x per request, see
// shared reference gateway.md), so it stays the hot-reload loop only.
//
// The bundle is what `wrangler deploy` would upload (`--dry-run --outdir`); the workerd config is
// generated from wrangler.toml's Durable Object bindings plus the vars given here.
import { spawnSync } from "node:child_process";
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { startService, type Service } from "./service.ts";
import { freePort } from "./sqld.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const BIN = join(ROOT, "node_modules/.bin");

export interface Edge extends Service {
  port: number;
}

export interface EdgeOptions {
  /** Folder for the bundle, the generated config, Durable Object storage and the log. */
  dir: string;
  port?: number;
  /** Text bindings (vars and secrets): LIBSQL_URL, KEY_PEPPER, ADMIN_API_KEY, CLUSTER_TOKEN, ... */
  vars: Record<string, string>;
  /** Reuse an existing bundle in `dir/bundle` instead of building (the launcher builds once). */
  skipBuild?: boolean;
  /** Serve the Chrome DevTools protocol on this loopback port (profiling; see bench/edge.ts). */
  inspectorPort?: number;
  /** Serve an invocation counter on this loopback port: a tail Worker that counts every
   * invocation of the edge (Worker fetches, each Durable Object RPC by class and method, alarms,
   * WebSocket events) and answers GET with the counts as JSON (bench/edge-do-calls.ts). */
  invocationCounterPort?: number;
  /** The wrangler.toml whose compatibility date, flags and Durable Object classes the config takes
   * (default this checkout's): an A/B side built from another revision runs with that revision's
   * settings, not the working tree's (bench/edge-ab.ts). */
  wranglerToml?: string;
}

/** The tail Worker behind `invocationCounterPort`: one key per kind of invocation. */
const INVOCATION_COUNTER = `const counts = {};
const kind = (e) => !e ? "other" : "rpcMethod" in e ? "rpc " + e.rpcMethod : "request" in e ? "fetch" : "scheduledTime" in e ? "alarm" : "getWebSocketEvent" in e ? "websocket" : "other";
export default {
  tail(items) {
    for (const t of items) {
      const k = (t.entrypoint ?? t.scriptName ?? "?") + " " + kind(t.event);
      counts[k] = (counts[k] ?? 0) + 1;
    }
  },
  fetch() { return Response.json(counts); },
};
`;

/** Builds the Worker bundle exactly as `wrangler deploy` would, into `outDir` (from the tree at
 * `cwd`: another revision's, for A/B benchmarks). */
export function buildEdge(outDir: string, cwd = ROOT): void {
  const res = spawnSync(join(BIN, "wrangler"), ["deploy", "--dry-run", "--outdir", outDir], {
    cwd,
    env: { ...process.env, PATH: `${BIN}:${process.env.PATH}`, WRANGLER_SEND_METRICS: "false", WRANGLER_LOG: "warn" },
    encoding: "utf8",
  });
  if (res.status !== 0) throw new Error(`edge build failed:\n${res.stdout}\n${res.stderr}`);
}

/** The default team quotas of wrangler.toml's [vars] (`QUOTA_*`), as a deployment gets them. */
export function quotaDefaults(): Record<string, string> {
  const text = readFileSync(join(ROOT, "wrangler.toml"), "utf8");
  return Object.fromEntries([...text.matchAll(/^(QUOTA_[A-Z_]+)\s*=\s*"([^"]*)"/gm)].map((m) => [m[1]!, m[2]!]));
}

interface WranglerFacts {
  compatibilityDate: string;
  compatibilityFlags: string[];
  durableObjects: { binding: string; className: string }[];
}

/** Reads the few wrangler.toml facts the workerd config needs (flat keys; no TOML library). */
function readWranglerToml(path = join(ROOT, "wrangler.toml")): WranglerFacts {
  const text = readFileSync(path, "utf8");
  const str = (key: string) => text.match(new RegExp(`^${key}\\s*=\\s*"([^"]+)"`, "m"))?.[1];
  const flags = text.match(/^compatibility_flags\s*=\s*\[([^\]]*)\]/m)?.[1] ?? "";
  const durableObjects = [...text.matchAll(/\[\[durable_objects\.bindings\]\]\s*name\s*=\s*"([^"]+)"\s*class_name\s*=\s*"([^"]+)"/g)].map(
    (m) => ({ binding: m[1]!, className: m[2]! }),
  );
  return {
    compatibilityDate: str("compatibility_date") ?? "2026-11-01",
    compatibilityFlags: [...flags.matchAll(/"([^"]+)"/g)].map((m) => m[1]!),
    durableObjects,
  };
}

const capnpString = (s: string) => JSON.stringify(s);

// Embeds are relative to the config file, which sits in `dir` beside `bundle/`.
function workerdConfig(dir: string, port: number, vars: Record<string, string>, counterPort?: number, wranglerToml?: string): string {
  const bundleDir = join(dir, "bundle");
  const w = readWranglerToml(wranglerToml);
  const modules = readdirSync(bundleDir)
    .filter((f) => f.endsWith(".js") || f.endsWith(".mjs"))
    .sort((a, b) => (a === "index.js" ? -1 : b === "index.js" ? 1 : a.localeCompare(b)))
    .map((f) => `(name = ${capnpString(f)}, esModule = embed ${capnpString(`bundle/${f}`)})`);
  const bindings = [
    ...w.durableObjects.map((d) => `(name = ${capnpString(d.binding)}, durableObjectNamespace = ${capnpString(d.className)})`),
    ...Object.entries(vars).map(([k, v]) => `(name = ${capnpString(k)}, text = ${capnpString(v)})`),
  ];
  const namespaces = w.durableObjects.map(
    (d) => `(className = ${capnpString(d.className)}, uniqueKey = ${capnpString(`sandbox-edge-${d.className}`)}, enableSql = true)`,
  );
  if (counterPort) writeFileSync(join(dir, "invocation-counter.js"), INVOCATION_COUNTER);
  const counter = counterPort
    ? { service: `\n    (name = "counter", worker = (compatibilityDate = ${capnpString(w.compatibilityDate)}, modules = [(name = "counter.js", esModule = embed "invocation-counter.js")])),`, socket: `, (name = "counter", address = ${capnpString(`127.0.0.1:${counterPort}`)}, http = (), service = "counter")`, tails: `\n  tails = ["counter"],` }
    : { service: "", socket: "", tails: "" };
  return `using Workerd = import "/workerd/workerd.capnp";

const config :Workerd.Config = (
  services = [
    (name = "edge", worker = .edge),${counter.service}
    (name = "do-storage", disk = (path = ${capnpString(join(dir, "do-storage"))}, writable = true)),
    # sqld and the agent's ingress listen on loopback; the default outbound allows public only.
    (name = "internet", network = (allow = ["public", "private", "local"])),
  ],
  sockets = [(name = "http", address = ${capnpString(`127.0.0.1:${port}`)}, http = (), service = "edge")${counter.socket}],
);

const edge :Workerd.Worker = (
  compatibilityDate = ${capnpString(w.compatibilityDate)},
  compatibilityFlags = [${w.compatibilityFlags.map(capnpString).join(", ")}],
  modules = [${modules.join(",\n    ")}],
  bindings = [${bindings.join(",\n    ")}],
  durableObjectNamespaces = [${namespaces.join(",\n    ")}],
  durableObjectStorage = (localDisk = "do-storage"),
  globalOutbound = "internet",${counter.tails}
);
`;
}

/** Builds (unless told not to) and serves the edge on workerd; resolves once it answers /health. */
export async function startEdge(opts: EdgeOptions): Promise<Edge> {
  const bundleDir = join(opts.dir, "bundle");
  mkdirSync(join(opts.dir, "do-storage"), { recursive: true });
  if (!opts.skipBuild) buildEdge(bundleDir);
  const port = opts.port || (await freePort());
  const configPath = join(opts.dir, "config.capnp");
  writeFileSync(configPath, workerdConfig(opts.dir, port, opts.vars, opts.invocationCounterPort, opts.wranglerToml));
  const service = await startService({
    name: "workerd",
    bin: join(BIN, "workerd"),
    args: ["serve", configPath, ...(opts.inspectorPort ? [`--inspector-addr=127.0.0.1:${opts.inspectorPort}`] : [])],
    url: `http://127.0.0.1:${port}`,
    logFile: join(opts.dir, "workerd.log"),
    readyWithinMs: 20_000,
  });
  return { ...service, port };
}
