// Kubernetes figures against a real kube-apiserver + etcd (tools/kube/build.sh), the test kubelet
// making pods Ready, and the kubernetes driver under the agent's RBAC identity:
//   kube.claim_p50_ms / kube.claim_p99_ms   the agent's side of a claim on a warm pool of 500 Ready
//                                           pods, 50 concurrent clients (relabel the Sandbox and
//                                           pod, drop the SandboxSet owner, status, Event)
//   kube.apiserver_requests_per_claim       requests the API server counted during the claims
//                                           (apiserver_request_total, watches excluded), per claim
//   kube.agent_kib_per_sandbox              heap of a freshly started driver whose informers hold
//                                           5,000 sandboxes (Sandbox + Pod objects), per sandbox
//   node bench/kube.ts                      prints the figures as JSON
// Sizes: KUBE_BENCH_POOL (500), KUBE_BENCH_CLIENTS (50), KUBE_BENCH_SANDBOXES (5000).
import { spawnSync } from "node:child_process";
import { setFlagsFromString } from "node:v8";
import { KubeConfig } from "@kubernetes/client-node";
import { runInNewContext } from "node:vm";
import { KubernetesDriver, type KubeDesiredSandbox } from "../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { AGENT_USER, startCluster, type Cluster } from "../test/kube/support/cluster.ts";
import { TestKubelet } from "../test/kube/support/kubelet.ts";
import type { BenchContext, Figures } from "./run.ts";
import { percentile as pct, round, timedConcurrently } from "./stats.ts";

const POOL = Number(process.env.KUBE_BENCH_POOL ?? 500);
const CLIENTS = Number(process.env.KUBE_BENCH_CLIENTS ?? 50);
const SANDBOXES = Number(process.env.KUBE_BENCH_SANDBOXES ?? 5000);
const RUNTIME_IMAGE = "ghcr.io/kruise-edge/sandbox-agent:bench";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

function desired(id: string, over: Partial<KubeDesiredSandbox>): KubeDesiredSandbox {
  return { id, generation: 1, template: "pool", state: "Running", pauseStrategy: "Stop", resources: { cpuCount: 1, memoryMB: 512 }, allowInternetAccess: true, ...over };
}

/** Runs `work` over `items` with `n` concurrent workers; returns each item's latency in ms. */
function concurrently<T>(items: T[], n: number, work: (item: T) => Promise<unknown>): Promise<number[]> {
  return timedConcurrently(items.length, n, (i) => work(items[i]!));
}

async function until(what: string, check: () => Promise<boolean> | boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Non-watch requests the API server has served so far (its own counter). */
function apiserverRequests(cluster: Cluster): number {
  let total = 0;
  for (const line of cluster.kubectl(["get", "--raw", "/metrics"]).split("\n")) {
    if (!line.startsWith("apiserver_request_total{") || line.includes('verb="WATCH"')) continue;
    total += Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  return total;
}

function namespace(cluster: Cluster, name: string, sandboxSet: boolean): void {
  cluster.kubectl(["create", "namespace", name]);
  if (!sandboxSet) return;
  cluster.kubectl(["-n", name, "apply", "-f", "-"], `
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxSet
metadata: { name: pool }
spec:
  replicas: ${POOL}
  template:
    spec:
      containers: [{ name: sandbox, image: python:3.12 }]
`);
}

export async function run(_ctx?: BenchContext): Promise<Figures> {
  const cluster = await startCluster();
  const figures: Figures = {};
  try {
    cluster.kubectl(["apply", "-k", "k8s/crd"]);
    cluster.kubectl(["wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"]);
    cluster.kubectl(["apply", "-f", "k8s/namespace.yaml", "-f", "k8s/rbac.yaml"]);
    cluster.kubectl(["create", "clusterrolebinding", "sandbox-agent-bench", "--clusterrole=sandbox-agent", `--user=${AGENT_USER}`]);

    // Claims on a warm pool.
    namespace(cluster, "claims", true);
    const kubelet = new TestKubelet(cluster.kubeConfig(), "claims");
    await kubelet.start();
    const driver = new KubernetesDriver({ kubeConfig: cluster.kubeConfig("agent"), namespace: "claims", runtimeImage: RUNTIME_IMAGE });
    await driver.start();
    const ids = Array.from({ length: POOL }, (_, i) => `warm${i}`);
    let t = performance.now();
    await concurrently(ids, 20, (id) => driver.ensure(desired(id, { pool: "pool", claimed: false })));
    await until("warm pool Ready", async () => (await Promise.all(ids.map((id) => driver.observe(id)))).every((o) => o?.ready), 300_000);
    const warmS = (performance.now() - t) / 1000;
    await new Promise((r) => setTimeout(r, 1000)); // let status writes of the warm-up settle
    const before = apiserverRequests(cluster);
    const driverBefore = driver.requests;
    t = performance.now();
    // When each claim becomes visible to API clients (the driver's own watch sees the label).
    const started = new Map<string, number>();
    const visible: number[] = [];
    driver.sandboxes.onChange((o) => {
      const id = o.metadata?.labels?.["agents.kruise.io/sandbox-id"];
      const t0 = id ? started.get(id) : undefined;
      if (t0 !== undefined && o.metadata?.labels?.["agents.kruise.io/sandbox-claimed"] === "true") {
        started.delete(id!);
        visible.push(performance.now() - t0);
      }
    });
    const latencies = await concurrently(ids, CLIENTS, (id) => {
      started.set(id, performance.now());
      return driver.ensure(desired(id, { pool: "pool", claimed: true, generation: 2 }));
    });
    await until("claims visible", () => visible.length === POOL, 120_000);
    const claimS = (performance.now() - t) / 1000;
    await new Promise((r) => setTimeout(r, 1000)); // pool status writes the claims caused
    const requests = apiserverRequests(cluster) - before - 1; // minus our own /metrics read
    figures["kube.claim_p50_ms"] = { value: round(pct(latencies, 50)), unit: "ms", target: "<= 50" };
    figures["kube.claim_p99_ms"] = { value: round(pct(latencies, 99)), unit: "ms", target: "<= 200" };
    figures["kube.claim_visible_p50_ms"] = { value: round(pct(visible, 50)), unit: "ms" };
    figures["kube.claim_visible_p99_ms"] = { value: round(pct(visible, 99)), unit: "ms" };
    figures["kube.apiserver_requests_per_claim"] = { value: round(requests / POOL), unit: "requests" };
    figures["kube.driver_requests_per_claim"] = { value: round((driver.requests - driverBefore) / POOL), unit: "requests" };
    figures["kube.warm_pool_ready_s"] = { value: round(warmS), unit: "s" };
    figures["kube.claims_per_s"] = { value: round(POOL / claimS), unit: "claims/s" };
    await driver.stop();
    await kubelet.stop();

    // Memory of the agent's view of 5,000 sandboxes.
    namespace(cluster, "many", false);
    const kubelet2 = new TestKubelet(cluster.kubeConfig(), "many");
    await kubelet2.start();
    const filler = new KubernetesDriver({ kubeConfig: cluster.kubeConfig("agent"), namespace: "many", runtimeImage: RUNTIME_IMAGE });
    await filler.start();
    const many = Array.from({ length: SANDBOXES }, (_, i) => `s${i}`);
    t = performance.now();
    await concurrently(many, 50, (id) => filler.ensure(desired(id, { template: "python:3.12", claimed: true })));
    await until("5,000 Ready", async () => (await filler.list()).filter((o) => o.ready).length >= SANDBOXES, 600_000);
    figures["kube.create_5000_s"] = { value: round((performance.now() - t) / 1000), unit: "s" };
    await filler.stop();
    await kubelet2.stop();
    const probe = spawnSync(process.execPath, [import.meta.filename, "--memory-probe", cluster.agentKubeconfig, "many"], { encoding: "utf8" });
    const measured = JSON.parse(probe.stdout.trim().split("\n").pop() ?? "{}") as { bytes?: number; sandboxes?: number };
    if (!measured.bytes || !measured.sandboxes) throw new Error(`memory probe failed: ${probe.stderr}`);
    figures["kube.agent_kib_per_sandbox"] = { value: round(measured.bytes / 1024 / measured.sandboxes), unit: "KiB", target: "<= 6" };
  } finally {
    await cluster.stop();
  }
  return figures;
}

/** In a fresh process: heap held by a driver whose informers hold every sandbox of a namespace. */
async function memoryProbe(kubeconfig: string, ns: string): Promise<void> {
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfig);
  // Warm up the client code paths with an empty namespace so their one-off cost is not counted.
  const warm = new KubernetesDriver({ kubeConfig: kc, namespace: "default", runtimeImage: RUNTIME_IMAGE });
  await warm.start();
  await warm.list();
  await warm.stop();
  await new Promise((r) => setTimeout(r, 200));
  gc();
  const before = process.memoryUsage().heapUsed;
  const driver = new KubernetesDriver({ kubeConfig: kc, namespace: ns, runtimeImage: RUNTIME_IMAGE });
  await driver.start();
  const sandboxes = (await driver.list()).length;
  await new Promise((r) => setTimeout(r, 500));
  gc();
  const bytes = process.memoryUsage().heapUsed - before;
  console.log(JSON.stringify({ bytes, sandboxes }));
  await driver.stop();
  process.exit(0);
}

if (import.meta.main) {
  if (process.argv[2] === "--memory-probe") await memoryProbe(process.argv[3]!, process.argv[4]!);
  else console.log(JSON.stringify(await run(), null, 2));
}
