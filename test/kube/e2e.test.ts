// The whole path on Kubernetes: a SandboxSet applied with kubectl becomes the edge's pool, the
// agent (kubernetes driver) warms it as pods, the test kubelet makes them Ready and runs a real
// agent-runtime per pod, and the unmodified e2b SDK creates a sandbox (a claim), runs a command in
// it through the edge's gateway and the agent's ingress, and kills it; the pool refills.
import { spawn, type ChildProcess } from "node:child_process";
import { join, resolve } from "node:path";
import { CoreV1Api, PatchStrategy, setHeaderOptions, Watch, type V1Pod } from "@kubernetes/client-node";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startAgent, type Agent } from "../../controllers/agent/agent.ts";
import { KubernetesDriver } from "../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { AdminApiPoolSink, SandboxSetSync } from "../../controllers/drivers/kubernetes/sandboxset-sync.ts";
import { startTestEdge, type TestEdge } from "./support/edge.ts";
import { TestKubelet } from "./support/kubelet.ts";
import { kubeConfig, kubectlOk, table, until } from "./support/namespace.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const NS = "admin"; // the admin key's team: team name = namespace
let edge: TestEdge;
let kubelet: TestKubelet;
let driver: KubernetesDriver;
let agent: Agent;
let sync: SandboxSetSync;
const runtimes = new Map<string, ChildProcess>();
let stopRuntimes = () => {};

/** The container runtime's half of the test kubelet: one real agent-runtime per Ready pod. */
async function runRuntimes(): Promise<void> {
  const kc = kubeConfig();
  const core = kc.makeApiClient(CoreV1Api);
  const patch = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);
  const onPod = async (pod: V1Pod) => {
    const name = pod.metadata!.name!;
    if (!pod.status?.podIP || runtimes.has(name) || pod.metadata?.deletionTimestamp) return;
    const child = spawn(join(ROOT, "node_modules/.bin/node"), ["controllers/runtime/main.ts", "--port", "0", "--host", "127.0.0.1"], { cwd: ROOT, stdio: ["ignore", "pipe", "inherit"] });
    runtimes.set(name, child);

    const url = await new Promise<string>((ok) => child.stdout!.on("data", (b: Buffer) => { const m = /listening on (http:\/\/\S+)/.exec(b.toString()); if (m) ok(m[1]!); }));

    await core.patchNamespacedPod({ name, namespace: NS, body: { metadata: { annotations: { "agents.kruise.io/runtime-url": url } } } }, patch);
  };
  const ctl = await new Watch(kc).watch(`/api/v1/namespaces/${NS}/pods`, {}, (phase: string, pod: V1Pod) => {

    if (phase === "DELETED") {
      runtimes.get(pod.metadata!.name!)?.kill();
      runtimes.delete(pod.metadata!.name!);
    } else void onPod(pod).catch((e) => console.error("runtime launcher:", e));
  }, () => {});
  stopRuntimes = () => ctl.abort();
}

beforeAll(async () => {
  edge = await startTestEdge("e2e");
  kubectlOk(["create", "namespace", NS]);
  kubelet = new TestKubelet(kubeConfig(), NS);
  await kubelet.start();
  await runRuntimes();
  driver = new KubernetesDriver({ kubeConfig: kubeConfig("agent"), namespace: NS, runtimeImage: "ghcr.io/kruise-edge/sandbox-agent:test", onChange: (id) => agent?.reconciler.queue.add(id) });
  await driver.start();
  agent = await startAgent({ edgeUrl: edge.url, clusterToken: edge.clusterToken, clusterId: "kube", dataDir: join(edge.dir, "agent"), driver, log: () => {} });
  await agent.link.whenConnected();
  sync = new SandboxSetSync({ sandboxSets: driver.sandboxSets, namespace: NS, cluster: "kube", sink: new AdminApiPoolSink(edge.url, edge.adminKey), retryMs: 200 });
  sync.start();
}, 180_000);

afterAll(async () => {
  sync?.stop();
  await agent?.stop();
  await driver?.stop();
  stopRuntimes();
  for (const c of runtimes.values()) c.kill();
  await kubelet?.stop();
  await edge?.stop();
});

describe("E2B on Kubernetes", () => {
  it("a kubectl-applied SandboxSet warms pods; an E2B create claims one, runs a command, and the pool refills", async () => {
    kubectlOk(["-n", NS, "apply", "-f", "-"], `
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxSet
metadata: { name: python }
spec:
  replicas: 2
  template:
    spec:
      containers: [{ name: sandbox, image: python:3.12 }]
`);
    await until("warm pool of 2", () => table(kubectlOk(["-n", NS, "get", "sbs", "python"]))[0]?.AVAILABLE === "2", 60_000);
    const sbx = await Sandbox.create("python", { apiKey: edge.adminKey, apiUrl: edge.url, sandboxUrl: edge.url, requestTimeoutMs: 30_000 });
    const run = await sbx.commands.run("echo hello from $HOSTNAME-less pod");
    expect(run.stdout).toContain("hello from");
    const claimed = await until("claimed Sandbox", () => {
      const rows = table(kubectlOk(["-n", NS, "get", "sbx", "-l", `agents.kruise.io/sandbox-id=${sbx.sandboxId}`]));
      return rows[0]?.CLAIMED === "true" ? rows[0] : undefined;
    }, 20_000);
    expect(claimed.STATUS).toBe("Running");
    await until("pool refilled", () => {
      const r = table(kubectlOk(["-n", NS, "get", "sbs", "python"]))[0];
      return r?.REPLICAS === "2" && r.AVAILABLE === "2";
    }, 60_000);
    expect(await sbx.kill()).toBe(true);
    await until("sandbox gone", () => !kubectlOk(["-n", NS, "get", "sbx", "-l", `agents.kruise.io/sandbox-id=${sbx.sandboxId}`, "-o", "name"]).trim(), 30_000);
  });

  it("kubectl scale and delete of the SandboxSet converge: pods follow the pool, nothing is left behind", async () => {
    const pool = () => table(kubectlOk(["-n", NS, "get", "sbs", "python"]))[0];
    const podCount = () => kubectlOk(["-n", NS, "get", "pods", "-l", "agents.kruise.io/sandbox-pool=python", "-o", "name"]).trim().split("\n").filter(Boolean).length;
    kubectlOk(["-n", NS, "scale", "sbs", "python", "--replicas=4"]);
    await until("4 warm", () => pool()?.AVAILABLE === "4" && podCount() === 4, 60_000);
    kubectlOk(["-n", NS, "scale", "sbs", "python", "--replicas=1"]);
    await until("1 warm", () => pool()?.REPLICAS === "1" && podCount() === 1, 60_000);
    kubectlOk(["-n", NS, "delete", "sbs", "python"]);
    await until("drained", () => podCount() === 0 && !kubectlOk(["-n", NS, "get", "sbx", "-o", "name"]).trim(), 60_000);
  });
});
