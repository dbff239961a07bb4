// CRD sync against the real edge (sqld + the Worker on workerd): SandboxSets applied with kubectl
// become the edge's templates for the namespace's team, follow `kubectl scale`, and go away with
// `kubectl delete`; a restarted agent pushes what changed while it was down.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KubernetesDriver } from "../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { AdminApiPoolSink, SandboxSetSync } from "../../controllers/drivers/kubernetes/sandboxset-sync.ts";
import { startTestEdge, type TestEdge } from "./support/edge.ts";
import { freshNamespace, kubeConfig, kubectlOk, until } from "./support/namespace.ts";

let edge: TestEdge;
let ns: string;
let driver: KubernetesDriver;
let sync: SandboxSetSync;

async function startSync(): Promise<void> {
  driver = new KubernetesDriver({ kubeConfig: kubeConfig("agent"), namespace: ns, runtimeImage: "ghcr.io/kruise-edge/sandbox-agent:test" });
  await driver.start();
  sync = new SandboxSetSync({ sandboxSets: driver.sandboxSets, namespace: ns, cluster: "kube-test", sink: new AdminApiPoolSink(edge.url, edge.adminKey), retryMs: 200 });
  sync.start();
}

async function stopSync(): Promise<void> {
  sync.stop();
  await driver.stop();
}

/** The edge's view of a template (404 → undefined). */
async function edgeTemplate(id: string): Promise<{ spec: Record<string, unknown> } | undefined> {
  const res = await fetch(`${edge.url}/admin/teams/${ns}/templates/${id}`, { headers: { "x-api-key": edge.adminKey } });
  if (res.status === 404) return undefined;
  if (!res.ok) throw new Error(`edge: ${res.status} ${await res.text()}`);
  return (await res.json()) as { spec: Record<string, unknown> };
}

beforeAll(async () => {
  edge = await startTestEdge("sync");
  ns = await freshNamespace("sync");
  await startSync();
});

afterAll(async () => {
  await stopSync().catch(() => {});
  await edge?.stop();
});

describe("SandboxSet → edge template sync", () => {
  it("a SandboxSet applied with kubectl becomes the team's template with its pool spec", async () => {
    kubectlOk(["-n", ns, "apply", "-f", "-"], `
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxSet
metadata: { name: agents }
spec:
  replicas: 2
  updateStrategy: { maxUnavailable: 1 }
  template:
    spec:
      containers:
        - name: sandbox
          image: python:3.12
          env: [{ name: MODE, value: eval }]
          resources: { limits: { cpu: "2", memory: 1Gi } }
`);
    const t = await until("template on the edge", () => edgeTemplate("agents"), 20_000);
    expect(t.spec).toMatchObject({ cluster: "kube-test", replicas: 2, image: "python:3.12", cpuCount: 2, memoryMB: 1024, env: { MODE: "eval" }, pauseStrategy: "Stop", updateStrategy: { maxUnavailable: 1 } });
  });

  it("kubectl scale changes the edge pool's replicas", async () => {
    kubectlOk(["-n", ns, "scale", "sbs", "agents", "--replicas=5"]);
    await until("replicas 5 on the edge", async () => (await edgeTemplate("agents"))?.spec.replicas === 5, 20_000);
  });

  it("kubectl delete removes the template from the edge", async () => {
    kubectlOk(["-n", ns, "delete", "sbs", "agents"]);
    await until("template gone", async () => (await edgeTemplate("agents")) === undefined, 20_000);
  });

  it("a restarted agent pushes what changed while it was down", async () => {
    await stopSync();
    kubectlOk(["-n", ns, "apply", "-f", "-"], `
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxSet
metadata: { name: offline }
spec:
  replicas: 1
  template: { spec: { containers: [{ name: sandbox, image: node:22 }] } }
`);
    expect(await edgeTemplate("offline")).toBeUndefined();
    await startSync();
    const t = await until("template after restart", () => edgeTemplate("offline"), 20_000);
    expect(t.spec).toMatchObject({ replicas: 1, image: "node:22", cpuCount: 1, memoryMB: 512 });
    await until("settled", () => sync.settled);
  });
});
