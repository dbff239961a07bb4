// The in-cluster agent (local driver by default).
//   node controllers/agent/main.ts --edge http://127.0.0.1:8787 --data-dir .data/agent
//        [--cluster local] [--ingress-port 0] [--ingress-host 127.0.0.1] [--level bwrap+cgroup|bwrap|process]
//        [--on-exit keep|stop|destroy] [--metrics-port 0] [--metrics-host 127.0.0.1] [--log-format json|text]
//        [--otlp-endpoint http://collector:4318]
//        [--driver local|kubernetes [--kubeconfig PATH] [--namespace NS] [--runtime-image IMAGE] [--interpreter-image IMAGE]
//                                   [--watch-namespaces A,B | --all-namespaces] [--pod-runtime-tracing]]
// Env: CLUSTER_TOKEN (required; this cluster's own token, `npm run cluster-token -- <--cluster>`,
// which the edge accepts for that cluster id only), EDGE_URL,
// OTEL_EXPORTER_OTLP_ENDPOINT (the --otlp-endpoint default: traces off when neither is set).
// With --driver kubernetes the SandboxSets and SandboxClaims of the namespace (and of the watched
// ones: each namespace is a team), and kubectl edits of Sandboxes, go to the edge over the same
// session (crd-link.ts).
import { parseArgs } from "node:util";
import { startAgent, type OnExit } from "./agent.ts";
import { DataDirInUseError, lockDataDir } from "./data-dir-lock.ts";
import type { CrdLink, KubectlRequests } from "./crd-link.ts";
import { featureGatesFlag, KUBERNETES_FLAGS, watchNamespacesFlag } from "../drivers/kubernetes/flags.ts";
import { closeInheritedFds } from "../lib/inherited-fds.ts";
import { configureLogs, logger, parseLogFormat } from "../lib/log.ts";
import { startTracing } from "../lib/tracing.ts";

const { values } = parseArgs({
  options: {
    edge: { type: "string", default: process.env.EDGE_URL },
    cluster: { type: "string", default: "local" },
    "data-dir": { type: "string", default: ".data/agent" },
    "ingress-port": { type: "string", default: "0" },
    "ingress-host": { type: "string", default: "127.0.0.1" },
    level: { type: "string" },
    // keep: sandboxes outlive the agent (default); stop: end their processes, keep their files;
    // destroy: remove them.
    "on-exit": { type: "string", default: "keep" },
    // Serve the embedded runtime directly on 127.0.0.1:PORT as well (benchmarks, debugging).
    "runtime-port": { type: "string" },
    // Prometheus metrics at /metrics on this port (0: off), on --metrics-host (loopback by default).
    "metrics-port": { type: "string", default: "0" },
    "metrics-host": { type: "string", default: "127.0.0.1" },
    // One JSON object per line (the default when stdout is not a terminal) or text for a person.
    "log-format": { type: "string" },
    // OpenTelemetry traces to this OTLP/HTTP collector (off when empty).
    "otlp-endpoint": { type: "string", default: process.env.OTEL_EXPORTER_OTLP_ENDPOINT ?? "" },
    driver: { type: "string", default: "local" },
    ...KUBERNETES_FLAGS,
  },
});

const log = logger("agent");
/** A bad flag or environment: said once, and the agent exits 2. */
function usage(msg: string): never {
  log.error(msg);
  process.exit(2);
}
try {
  configureLogs({ format: parseLogFormat(values["log-format"]) });
} catch (err) {
  usage((err as Error).message);
}
// Before anything is spawned: what the agent starts (the spawner, and through it every holder and
// command) would inherit them.
const inherited = closeInheritedFds();
if (inherited.length) log.warn("closed descriptors inherited without close-on-exec: they would have reached every sandbox", { fds: inherited });
// Trimmed: a Secret made with --from-file keeps the file's trailing newline.
const token = process.env.CLUSTER_TOKEN?.trim();
if (!values.edge || !token) usage("--edge (or EDGE_URL) and CLUSTER_TOKEN are required");
const onExit = values["on-exit"] as OnExit;
if (!["keep", "stop", "destroy"].includes(onExit)) usage("--on-exit must be keep, stop or destroy");
const level = values.level as "bwrap+cgroup" | "bwrap" | "process" | undefined;
if (values.driver !== "local" && values.driver !== "kubernetes") usage("--driver must be local or kubernetes");
const metricsPort = Number(values["metrics-port"]);
if (!Number.isInteger(metricsPort) || metricsPort < 0 || metricsPort > 65535) usage("--metrics-port must be a port number (0: off)");
try {
  watchNamespacesFlag(values);
  featureGatesFlag(values["feature-gates"]);
} catch (err) {
  usage((err as Error).message);
}
if (values["otlp-endpoint"] && !/^https?:\/\/[^\s]+$/.test(values["otlp-endpoint"])) usage("--otlp-endpoint must be an http(s) URL");
const stopTracing = values["otlp-endpoint"] ? startTracing({ endpoint: values["otlp-endpoint"], serviceName: "sandbox-agent" }) : async () => {};
// One agent per data dir, decided before anything of it is touched (the Kubernetes driver below
// starts watching as it is made): a second one exits here, naming the first.
let dataDirLock;
try {
  dataDirLock = lockDataDir(values["data-dir"]!);
} catch (err) {
  if (!(err instanceof DataDirInUseError)) throw err;
  log.error(err.message);
  process.exit(1);
}
// The kubernetes driver tells the reconciler when a pod changes (ready, IP, lost) instead of polling.
let requeue: (id: string) => void = () => {};
// kubectl edits reach the edge once the link exists; the driver reports each edit once, some of
// them (made while the agent was down) during its first list, so they wait for the link.
const requests: KubectlRequests | undefined = values.driver === "kubernetes" ? new (await import("./crd-link.ts")).KubectlRequests() : undefined;
// Loaded only when chosen: the Kubernetes client would otherwise sit in every local agent's memory
// (and every fork from it costs more the larger the agent is).
const driver = values.driver === "kubernetes" ? await (await import("../drivers/kubernetes/from-flags.ts")).kubernetesDriverFromFlags(values, (id) => requeue(id), requests!.onRequest, token) : undefined;
const agent = await startAgent({
  driver,
  edgeUrl: values.edge,
  clusterToken: token,
  clusterId: values.cluster,
  dataDir: values["data-dir"]!,
  dataDirLock,
  ingressHost: values["ingress-host"],
  ingressPort: Number(values["ingress-port"]),
  level,
  runtimePort: values["runtime-port"] === undefined ? undefined : Number(values["runtime-port"]),
  metricsPort,
  metricsHost: values["metrics-host"],
  podRuntimeSpans: values.driver === "kubernetes" && Boolean(values["pod-runtime-tracing"]),
});
requeue = (id) => agent.reconciler.queue.add(id);
let crd: CrdLink | undefined;
const crdLog = logger("crd");
if (driver) {
  crd = await (await import("./crd-link.ts")).startCrdLink({
    link: agent.link,
    driver,
    kubeConfig: driver.kubeConfig,
    namespace: driver.namespace,
    watchNamespaces: watchNamespacesFlag(values),
    cluster: values.cluster!,
    requests,
    log: (m) => crdLog.info(m),
    commit: { enabled: featureGatesFlag(values["feature-gates"]).Commit, job: { image: values["commit-image"]! } },
  });
}
const caps = agent.driver.capabilities;
log.info("started", { driver: agent.driver.name, isolation: caps.level, disk: caps.disk, ingress: agent.ingressUrl, metrics: agent.metricsUrl, cluster: values.cluster, traces: values["otlp-endpoint"] || undefined });
for (const note of caps.notes) log.info(note, { driver: agent.driver.name });
agent.link.whenConnected().then(() => log.info("connected to the edge", { edge: values.edge, cluster: values.cluster }));

for (const sig of ["SIGINT", "SIGTERM"] as const) {
  process.once(sig, () => void (crd?.stop() ?? Promise.resolve()).then(() => agent.stop(onExit)).then(stopTracing).then(() => process.exit(0)));
}
