// Wiring of the in-cluster agent: driver + embedded agent-runtime + ingress + link + reconciler.
// `main.ts` is the CLI around it; tests and the launcher call startAgent directly or run main.ts.
import { forwardSpans, RUNTIME_SCOPE, traceHop, tracingOn } from "../lib/tracing.ts";
import { randomUUID } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import type { Driver, DriverCapabilities } from "../drivers/driver.ts";
import { LocalDriver } from "../drivers/local/local-driver.ts";
import { createRuntime } from "../runtime/runtime.ts";
import { logger, tapLogs, traceLogsBy } from "../lib/log.ts";
import { egressL7Requests, observeRuntimeProcesses, observeSandboxStates } from "../lib/metrics.ts";
import { auditFields } from "../../schema/api/network-audit.ts";
import { createIngress } from "./ingress.ts";
import { PodSpanCollector } from "./pod-spans.ts";
import { IntentStore } from "./intent-store.ts";
import { Link } from "./link.ts";
import { startMetricsServer, type MetricsServer } from "./metrics-server.ts";
import { Reconciler, desiredFor } from "./reconciler.ts";
import { BUILD_DISK_MB, CACHE_BOUND, TemplateBuilder } from "../drivers/local/builder/builder.ts";
import { RetiredTemplates } from "../drivers/local/builder/retire.ts";
import { RootfsStore } from "../drivers/local/rootfs/store.ts";
import { detectCgroups } from "../drivers/local/cgroups.ts";
import { MAX_TEMPLATE_FILE_BYTES } from "../../schema/api/template-build.ts";
import { SandboxLogs } from "./sandbox-logs.ts";
import { StartCommands } from "./start-commands.ts";
import { stopSandboxes } from "./stop-sandboxes.ts";
import { lockDataDir, type DataDirLock } from "./data-dir-lock.ts";

export interface AgentOptions {
  edgeUrl: string;
  clusterToken: string;
  clusterId?: string;
  dataDir: string;
  /** Ingress listen address; port 0 picks a free one. */
  ingressHost?: string;
  ingressPort?: number;
  /** The URL the edge should use for this ingress (defaults to http://host:port). */
  ingressUrl?: string;
  /** Cap the local driver's isolation level (tests use `process`). */
  level?: "bwrap+cgroup" | "bwrap" | "process";
  driver?: Driver;
  /** Also serve the embedded runtime directly on this loopback port (token auth only, no edge
   * signature): what a pod sidecar exposes. The benchmarks use it as the no-gateway baseline. */
  runtimePort?: number;
  /** Serve Prometheus metrics at /metrics on this port (0 or absent: off). */
  metricsPort?: number;
  /** Its listen address (default loopback). */
  metricsHost?: string;
  /** Pods' runtimes keep their spans for the agent (--pod-runtime-tracing): collect and forward them
   * to the agent's collector (pod-spans.ts). Only while the agent traces. */
  podRuntimeSpans?: boolean;
  log?: (msg: string) => void;
  /** The data dir's lock (data-dir-lock.ts), when the caller took it already: main.ts takes it
   * before its Kubernetes driver starts watching. Otherwise startAgent takes it. Either way the
   * agent's stop releases it. */
  dataDirLock?: DataDirLock;
}

/**
 * What happens to the sandboxes when the agent stops. `keep` (the default, like a kubelet restart):
 * they keep running and the next agent adopts them. `stop`: their processes end and their files
 * stay, so the next agent starts them again on the same files (`npm start`'s Ctrl-C). `destroy`:
 * nothing is left (test teardown).
 */
export type OnExit = "keep" | "stop" | "destroy";

export interface Agent {
  driver: Driver;
  ingressUrl: string;
  link: Link;
  reconciler: Reconciler;
  /** Each sandbox's recent log entries (append a start command's output here). */
  sandboxLogs: SandboxLogs;
  /** Where /metrics is served, when it is. */
  metricsUrl?: string;
  stop(onExit?: OnExit): Promise<void>;
}

/** A stable id per installation, so the edge's logs and status name the same agent across restarts. */
/** A copy step's archive from the edge, with the cluster token (at most the edge's own bound). */
async function fetchEdgeFile(edgeUrl: string, token: string, path: string): Promise<Uint8Array> {
  const res = await fetch(new URL(path, edgeUrl), { headers: { authorization: `Bearer ${token}` } });
  if (!res.ok) throw new Error(`fetching a copy step's files failed: ${res.status} ${(await res.text()).slice(0, 200)}`);
  const data = new Uint8Array(await res.arrayBuffer());
  if (data.byteLength > MAX_TEMPLATE_FILE_BYTES) throw new Error("a copy step's files are larger than the edge allows");
  return data;
}

/** The isolation the agent reports to the edge (its hello; `npm start` and /admin/clusters show it). */
export function isolationOf(caps: DriverCapabilities): string {
  return [caps.level, ...(caps.disk ? [`disk ${caps.disk}`] : []), ...(caps.sandboxInit === false ? ["no sandbox init (pid 1 killable)"] : [])].join(", ");
}

function agentId(dataDir: string): string {
  const file = join(dataDir, "agent-id");
  if (existsSync(file)) return readFileSync(file, "utf8").trim();
  const id = `agent-${randomUUID()}`;
  writeFileSync(file, id);
  return id;
}

/** Starts the agent, holding its data dir's lock for its life: a second agent on the same data
 * dir throws DataDirInUseError before it has touched anything there. */
export async function startAgent(opts: AgentOptions): Promise<Agent> {
  const lock = opts.dataDirLock ?? lockDataDir(opts.dataDir);
  let agent: Agent;
  try {
    agent = await startLocked(opts);
  } catch (err) {
    lock.release();
    throw err;
  }
  const stop = agent.stop;
  return Object.assign(agent, {
    stop: (onExit?: OnExit) => stop(onExit).finally(() => lock.release()),
  });
}

async function startLocked(opts: AgentOptions): Promise<Agent> {
  // Search only for other users: sandboxes' holders start as unprivileged host uids and must pass
  // through to the driver's directory (`local/`, letOwnersPass); nothing here is listed to them.
  mkdirSync(opts.dataDir, { recursive: true });
  chmodSync(opts.dataDir, 0o711);
  const agentLog = logger("agent");
  let trafficUnenforcedSaid = false;
  let profilesUnenforcedSaid = false;
  const log = opts.log ?? ((m: string) => agentLog.info(m));
  const id = agentId(opts.dataDir);
  // Each installation gets its own cgroup subtree: the driver treats cgroups without a record as
  // its own leftovers, so two agents on one host must never share one.
  const driver = opts.driver ?? new LocalDriver({ dataDir: join(opts.dataDir, "local"), level: opts.level, cgroupName: `kruise-${id.slice(-12)}`, spareDisks: 2 });
  // The subtree outlives the agent only while a sandbox is in it: every start of a fresh data dir
  // (each test's agent, each `npm start`) otherwise left one empty cgroup per hierarchy behind.
  // Only an empty one goes (the kernel refuses to remove a cgroup with processes or children), and
  // only once nothing of the agent creates sandboxes any more; the next start makes it again. A
  // driver given to the agent is its owner's to dispose (it may serve another agent after this).
  const removeCgroupsIfEmpty = () => {
    if (!opts.driver && driver instanceof LocalDriver) driver.removeEmptyParents();
  };
  const runtimeLog = logger("runtime");
  // Stop-paused sandboxes' code contexts are kept on disk too: they outlive an agent restart.
  const runtime = createRuntime({
    parkedDir: join(opts.dataDir, "runtime-parked"),
    traceRequest: (name, req, res, attributes) => traceHop(name, req, res, attributes, RUNTIME_SCOPE),
    onError: (err) => (opts.log ? log(`runtime error: ${(err as Error)?.stack ?? err}`) : runtimeLog.error("request failed", { error: (err as Error)?.stack ?? String(err) })),
  });
  const store = new IntentStore(join(opts.dataDir, "intents"));
  runtime.retainParked(store.ids());
  // Every line about a sandbox is also that sandbox's log (E2B's logs routes), kept a while after
  // it is deleted. Kept on disk too (bounded per sandbox), so an agent restart keeps them; a
  // sandbox deleted while the agent was down counts as ended when its file was last written.
  const sandboxLogs = new SandboxLogs({ dir: join(opts.dataDir, "sandbox-logs") });
  sandboxLogs.retainOnly(store.ids());
  // The proxy's audit of each sandbox's inspected requests: kept the same way, apart from its logs
  // so a busy sandbox's requests do not push its log lines out (schema/api/network-audit.ts).
  const networkAudit = new SandboxLogs({ dir: join(opts.dataDir, "network-audit") });
  networkAudit.retainOnly(store.ids());
  driver.setNetworkAudit?.((r) => {
    egressL7Requests.inc({ verdict: r.refused ? "refused" : "forwarded" });
    if (store.get(r.sandbox)) networkAudit.append(r.sandbox, r.refused ? "warn" : "info", `${r.method} ${r.host}${r.path} ${r.status}`, auditFields(r));
  });
  // A deleted template's built layers leave the store once no sandbox or snapshot mounts them
  // (set once the builder is made; swept again whenever a sandbox goes).
  let retired: RetiredTemplates | undefined;
  const untap = tapLogs((level, component, msg, fields, time) => {
    const id = fields.sandboxId;
    if (typeof id !== "string") return;
    if (msg === "phase" && fields.phase === "Deleted") {
      void retired?.sweep().catch(() => {});
      networkAudit.ended(id);
      return sandboxLogs.ended(id);
    }
    if (!store.get(id)) return; // not ours (another agent in this process), or gone
    sandboxLogs.append(id, level, msg, { component, ...fields }, time.getTime());
  });

  // Acks wait until the reconciler has acted on the generation they deliver.
  const waitingAcks = new Map<string, { seq: number; generation: number }[]>();
  let link: Link;
  // Templates' start and ready commands run through the embedded runtime: host-view drivers only
  // (a pod's image starts its own entrypoint).
  const starts = driver.capabilities.hostView ? new StartCommands({ logs: sandboxLogs, changed: (sid) => reconciler.queue.add(sid, { urgent: store.get(sid)?.owner.kind === "sandbox" }) }) : undefined;
  const reconciler: Reconciler = new Reconciler({
    store,
    driver,
    runtime,
    starts,
    report: (obs) => link.observe(obs),
    onError: (id, err) => agentLog.error("reconcile failed, retrying", { sandboxId: id, error: err }),
    settled(id, generation, result, message, snapshotError) {
      const waiting = waitingAcks.get(id);
      if (!waiting) return;
      const done = waiting.filter((w) => w.generation <= generation);
      const rest = waiting.filter((w) => w.generation > generation);
      if (rest.length) waitingAcks.set(id, rest);
      else waitingAcks.delete(id);
      for (const w of done) link.ack({ seq: w.seq, sandboxId: id, generation: w.generation, result, message, ...(w.generation === generation && snapshotError ? { snapshotError } : {}) });
    },
  });
  // A sandbox whose pid 1 ended by itself: its next pass starts it again (a reboot, files kept).
  if (driver instanceof LocalDriver) driver.onChange((sid) => reconciler.queue.add(sid, { urgent: store.get(sid)?.owner.kind === "sandbox" }));

  // A line about a sandbox written while it is brought to a traced intent carries that trace's id.
  const untrace = traceLogsBy((fields) => (typeof fields.sandboxId === "string" ? reconciler.traceIdOf(fields.sandboxId) : undefined));

  const podSpans = opts.podRuntimeSpans && tracingOn()
    ? new PodSpanCollector({
        runtimeOf: (id) => {
          const url = reconciler.endpoint(id);
          return url ? { url, token: store.get(id)?.envdAccessToken ?? undefined } : undefined;
        },
        forward: forwardSpans,
      })
    : undefined;
  const ingress = await createIngress({
    clusterToken: opts.clusterToken,
    runtime,
    // The driver knows where a sandbox's port is: its own address (the local driver's sandboxes
    // with internet access), its loopback through the port relay (no network, egress rules), or
    // the host's loopback where it shares the host's network. Dialling the host's loopback here
    // would hand one sandbox's URL to whatever else listens on that port on this host.
    userPortTarget: (id, port) => {
      const remote = reconciler.endpoint(id);
      if (remote) return { host: new URL(remote).hostname, port };
      if (driver.connectUserPort) return { connect: () => driver.connectUserPort!(id, port) };
      const intent = store.get(id);
      return intent?.allowInternetAccess && !intent.egress ? { host: "127.0.0.1", port } : undefined;
    },
    remoteRuntime: (id) => reconciler.endpoint(id),
    podSpans,
  });
  await new Promise<void>((ok) => ingress.listen(opts.ingressPort ?? 0, opts.ingressHost ?? "127.0.0.1", ok));
  const addr = ingress.address() as AddressInfo;
  const ingressUrl = opts.ingressUrl ?? `http://${addr.address}:${addr.port}`;

  // Template builds need the local driver as root (overlay mounts, bubblewrap).
  const builder =
    driver.name === "local" && process.getuid?.() === 0
      ? new TemplateBuilder({
          store: new RootfsStore(),
          // Not under the driver's parent: the driver takes cgroups it has no record of for leftovers.
          cgroups: detectCgroups(`kruise-builds-${id.slice(-12)}`).layout,
          fetchFile: (path) => fetchEdgeFile(opts.edgeUrl, opts.clusterToken, path),
          send: (items) => link.sendBuildEvents(items),
          log: (msg, fields) => agentLog.info(msg, fields),
          journalDir: join(opts.dataDir, "builds"),
          network: driver instanceof LocalDriver ? (dir) => driver.stepNetwork(dir) : undefined,
          // A step's root is root of a user namespace of its own wherever sandboxes' is.
          uids: driver instanceof LocalDriver ? driver.stepUids() : "not the local driver",
          // Where sandboxes get disks of their own, so do a build's steps.
          buildDiskMB: driver.capabilities.disk === "quota" ? BUILD_DISK_MB : undefined,
          // Each team's cached layers stay within CACHE_BOUND (evicted least recently used first).
          onBuildEnd: (team) => void retired?.trim(team, CACHE_BOUND).then(
            (gone) => gone.length && agentLog.info("evicted cached layers past the team's bound", { team, layers: gone.length }),
            (err: Error) => agentLog.warn(`layer cache of team ${team}: ${err.message}`),
          ),
        })
      : undefined;
  // A running build's layers are in no record until it publishes its own: held by the builder.
  retired = builder && driver instanceof LocalDriver ? new RetiredTemplates(new RootfsStore(), () => driver.layersInUse(), () => builder.layersHeld(), (msg) => agentLog.warn(msg)) : undefined;

  link = new Link({
    edgeUrl: opts.edgeUrl,
    clusterId: opts.clusterId ?? "local",
    token: opts.clusterToken,
    log: opts.log,
    hello: async () => ({
      agentId: id,
      driver: driver.name,
      // What `npm start` prints: the level, how a sandbox's disk is bounded where the driver says,
      // and a pid 1 its tenant can end where the driver fell back to it.
      isolation: isolationOf(driver.capabilities),
      ingress: { url: ingressUrl },
      capabilities: { pauseStrategies: driver.capabilities.snapshotFs ? ["Freeze", "Stop"] : ["Freeze"], builder: builder !== undefined, networkRules: driver.setSandboxSecrets !== undefined },
      inventory: await reconciler.inventory(),
    }),
    onBuild: (frame) => builder?.start(frame),
    onBuildAcks: (ids) => builder?.acked(ids),
    // Build results the previous session did not ack go again on this one.
    onWelcome: () => builder?.relinked(),
    onRootfsDeletes: (names) => void retired?.retire(names).then((gone) => gone.length && agentLog.info("built layers removed", { layers: gone.length })).catch((err: unknown) => agentLog.error("built layers not removed", { error: err })),
    onLogsRequest: (req) => (req.query.stream === "audit" ? networkAudit : sandboxLogs).query(req.sandboxId, req.query),
    onSnapshotDeletes(ids) {
      for (const snapshotId of ids) {
        driver.deleteSnapshot({ id: snapshotId }).catch((err: unknown) => agentLog.error("snapshot delete failed", { snapshotId, error: err }));
      }
    },
    onTrafficPolicies(policies) {
      if (!driver.setTrafficPolicies) {
        // Said once per agent (the set comes with every welcome and change).
        if (policies.length && !trafficUnenforcedSaid) agentLog.warn("traffic policies not enforced: the driver has no data plane for them", { driver: driver.name });
        trafficUnenforcedSaid ||= policies.length > 0;
        return;
      }
      driver.setTrafficPolicies(policies).catch((err: unknown) => agentLog.error("traffic policies failed", { error: err }));
    },
    onSecurityProfiles(profiles, secrets) {
      // Before the set, whose first request may need them.
      driver.setProfileSecrets?.(secrets);
      if (!driver.setSecurityProfiles) {
        if (profiles.length && !profilesUnenforcedSaid) agentLog.warn("security profiles not enforced: the driver has no L7 data plane for them", { driver: driver.name });
        profilesUnenforcedSaid ||= profiles.length > 0;
        return;
      }
      driver.setSecurityProfiles(profiles).catch((err: unknown) => agentLog.error("security profiles failed", { error: err }));
    },
    onIntent(seq, intent, traceparent, secrets) {
      // Before the reconcile, which may start the sandbox's first request.
      driver.setSandboxSecrets?.(intent.sandboxId, secrets ?? {});
      if (reconciler.offer(intent, traceparent) === "stale") {
        // Already have it: ack at once, and re-report so an edge that lost our observation converges.
        reconciler.queue.add(intent.sandboxId);
        return "stale";
      }
      const list = waitingAcks.get(intent.sandboxId) ?? [];
      list.push({ seq, generation: intent.generation });
      waitingAcks.set(intent.sandboxId, list);
      return "pending";
    },
  });
  link.heartbeatStats = () => ({ sandboxes: store.ids().length, pending: reconciler.queue.depth });

  if (opts.runtimePort !== undefined) await runtime.listen({ port: opts.runtimePort, host: "127.0.0.1" });
  observeSandboxStates(() => reconciler.phaseCounts());
  observeRuntimeProcesses(() => runtime.processCount());
  const metrics: MetricsServer | undefined = opts.metricsPort ? await startMetricsServer(opts.metricsPort, opts.metricsHost) : undefined;

  await reconciler.resumeAll();
  // Builds a previous run was handed and did not finish go on (their events wait for the link).
  builder?.resume();
  link.start();

  return {
    driver,
    ingressUrl,
    link,
    reconciler,
    sandboxLogs,
    metricsUrl: metrics?.url,
    async stop(onExit: OnExit = "keep") {
      untap();
      untrace();
      sandboxLogs.flush();
      networkAudit.flush();
      await metrics?.close();
      link.close();
      builder?.dispose();
      retired?.dispose();
      reconciler.queue.close();
      await reconciler.queue.idle();
      podSpans?.stop();
      const closed = new Promise<void>((ok) => ingress.close(() => ok()));
      ingress.closeAllConnections();
      await closed;
      await runtime.close();
      if (onExit === "keep") {
        if (driver instanceof LocalDriver) driver.closeHelpers();
        removeCgroupsIfEmpty();
        return;
      }
      await stopSandboxes({
        driver,
        onExit,
        endProcesses: driver instanceof LocalDriver ? (id) => driver.endProcesses(id) : undefined,
        stoppedFor: (id) => {
          const intent = store.get(id);
          return intent?.template ? { ...desiredFor(intent), state: "Paused", pauseStrategy: "Stop" } : undefined;
        },
        log: (m) => agentLog.info(m),
      });
      // Nothing of this installation is left in the cgroup tree after a destroy; after a stop, no
      // spare disk is left mounted either (stopped sandboxes' disks are unmounted already).
      if (onExit === "destroy" && driver instanceof LocalDriver) await driver.dispose();
      else if (driver instanceof LocalDriver) {
        await driver.releaseSpares();
        driver.closeHelpers();
        removeCgroupsIfEmpty();
      }
    },
  };
}
