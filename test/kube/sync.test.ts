// SandboxSet sync over the agent's session against the real edge (sqld + the Worker on workerd):
// a SandboxSet applied with kubectl in namespace T becomes team T's template (its own key lists
// it) and its warm pool becomes pods in T; `kubectl scale` and `kubectl delete` converge; an older
// generation never overwrites a newer one; a restarted agent pushes what changed while it was down
// (a SandboxSet deleted meanwhile is removed from the edge too).
import { spawn } from "node:child_process";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { LinkPoolSink, poolSpecOf } from "../../controllers/agent/kube-sync/sandboxset-sync.ts";
import { startTestEdge, type TestEdge } from "./support/edge.ts";
import { startKubeAgent, type KubeAgent } from "./support/kube-agent.ts";
import { TestKubelet } from "./support/kubelet.ts";
import { freshNamespace, kubeConfig, kubectlOk, until } from "./support/namespace.ts";

const CLUSTER = "kube-sync";
let edge: TestEdge;
let ns: string;
let teamKey: string;
let kubelet: TestKubelet;
let k: KubeAgent;

/** The edge's view of a template through the admin API (404 → undefined). */
async function edgeTemplate(id: string): Promise<{ spec: Record<string, unknown> } | undefined> {
  const res = await fetch(`${edge.url}/admin/teams/${ns}/templates/${id}`, { headers: { "x-api-key": edge.adminKey } });
  if (res.status === 404) return undefined;
  if (!res.ok) throw new Error(`edge: ${res.status} ${await res.text()}`);
  return (await res.json()) as { spec: Record<string, unknown> };
}

const podsOf = (pool: string) => kubectlOk(["-n", ns, "get", "pods", "-l", `agents.kruise.io/sandbox-pool=${pool}`, "-o", "name"]).trim().split("\n").filter(Boolean);

beforeAll(async () => {
  edge = await startTestEdge("sync");
  ns = await freshNamespace("sync");
  kubelet = new TestKubelet(kubeConfig(), ns);
  await kubelet.start();
  k = await startKubeAgent(edge, ns, CLUSTER);
}, 120_000);

afterAll(async () => {
  await k?.stop().catch(() => {});
  await kubelet?.stop();
  await edge?.stop();
});

describe("SandboxSet → edge over the agent link", () => {
  it("a SandboxSet applied in namespace T is team T's template, and its warm pool becomes pods in T", async () => {
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
    // Members run on the cluster of the agent that sent it, whatever the spec said.
    expect(t.spec).toMatchObject({ cluster: CLUSTER, replicas: 2, image: "python:3.12", cpuCount: 2, memoryMB: 1024, env: { MODE: "eval" }, pauseStrategy: "Stop", updateStrategy: { maxUnavailable: 1 } });

    // The team (= namespace) exists on the edge now; a key of it lists the template.
    const res = await fetch(`${edge.url}/api-keys`, { method: "POST", headers: { "x-api-key": edge.adminKey, "content-type": "application/json" }, body: JSON.stringify({ name: "kube", teamName: ns }) });
    teamKey = ((await res.json()) as { key: string }).key;
    const listed = (await (await fetch(`${edge.url}/templates`, { headers: { "x-api-key": teamKey } })).json()) as { templateID: string; cpuCount: number; memoryMB: number }[];
    expect(listed).toContainEqual(expect.objectContaining({ templateID: "agents", cpuCount: 2, memoryMB: 1024 }));

    await until("2 pool pods in the namespace", () => podsOf("agents").length === 2, 30_000);
  });

  it("kubectl scale sbs converges on the edge and in pods", async () => {
    kubectlOk(["-n", ns, "scale", "sbs", "agents", "--replicas=3"]);
    await until("replicas 3 on the edge", async () => (await edgeTemplate("agents"))?.spec.replicas === 3, 20_000);
    await until("3 pool pods", () => podsOf("agents").length === 3, 30_000);
  });

  it("an older generation arriving late is ignored (the edge keeps the newest)", async () => {
    const set = k.driver.sandboxSets.get("agents")!;
    const generation = set.metadata!.generation!;
    const sink = new LinkPoolSink(k.agent.link);
    const old = { namespace: ns, name: "agents", uid: set.metadata!.uid!, generation: generation - 1, spec: { ...poolSpecOf(set as never, CLUSTER), replicas: 7 } };
    expect(await sink.upsert(old)).toBe("stale");
    expect((await edgeTemplate("agents"))?.spec.replicas).toBe(3);
  });

  it("the quota counts the whole pod; a SandboxSet it cannot count is refused on the SandboxSet (Warning Event, ReplicaFailure) and the edge keeps its last count", async () => {
    const apply = (helper: string) =>
      kubectlOk(["-n", ns, "apply", "-f", "-"], `
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxSet
metadata: { name: sized }
spec:
  replicas: 0
  template:
    spec:
      initContainers: [{ name: fetch, image: python:3.12, resources: { limits: { cpu: "40", memory: 1Gi } } }]
      containers:
        - { name: sandbox, image: python:3.12, resources: { limits: { cpu: "1500m", memory: "64e9" } } }
        - { name: helper, image: python:3.12, resources: ${helper} }
`);
    // Every container (exponent forms read as the API server reads them), the init container's peak.
    apply('{ limits: { cpu: "8", memory: 1Gi } }');
    const t = await until("sized on the edge", () => edgeTemplate("sized"), 20_000);
    // restCpu and initCpu: what a claim's in-place CPU leaves as it is (review 26 M3): the helper's
    // 8 cores beside the sandbox container, and the init container's 40 held before it starts, so
    // a claim is charged max(40, 8 + its in-place value) (review 27 final M2).
    expect(t.spec).toMatchObject({ cpuCount: 40, restCpu: 8, initCpu: 40, memoryMB: Math.ceil(64e9 / 2 ** 20) + 1024 });
    // Requests only: unbounded, so not counted at all (never as the old 1 core / 512 MiB default).
    apply('{ requests: { cpu: "32", memory: 64Gi } }');
    const events = () => kubectlOk(["-n", ns, "get", "events", "--field-selector", "involvedObject.kind=SandboxSet,involvedObject.name=sized,reason=UncountableResources,type=Warning", "-o", "jsonpath={.items[*].message}"]);
    await until("the Warning Event", () => events().includes('container "helper": no cpu or memory limit'), 20_000);
    const failure = () => (JSON.parse(kubectlOk(["-n", ns, "get", "sbs", "sized", "-o", "json"])) as { status?: { conditions?: { type: string; status: string; reason: string; message: string }[] } }).status?.conditions?.find((c) => c.type === "ReplicaFailure");
    const c = await until("the ReplicaFailure condition", failure, 20_000);
    expect(c).toMatchObject({ status: "True", reason: "UncountableResources", message: expect.stringContaining('container "helper": no cpu or memory limit') });
    expect((await edgeTemplate("sized"))?.spec).toMatchObject({ cpuCount: 40 });
    kubectlOk(["-n", ns, "delete", "sbs", "sized"]);
    await until("sized gone", async () => (await edgeTemplate("sized")) === undefined, 20_000);
  });

  it("kubectl delete sbs removes the template and its pods", async () => {
    kubectlOk(["-n", ns, "delete", "sbs", "agents"]);
    await until("template gone", async () => (await edgeTemplate("agents")) === undefined, 20_000);
    await until("pool pods gone", () => podsOf("agents").length === 0, 30_000);
  });

  it("a restarted agent pushes what changed while it was down, deletions included", async () => {
    kubectlOk(["-n", ns, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxSet\nmetadata: { name: leftover }\nspec: { replicas: 0, template: { spec: { containers: [{ name: sandbox, image: node:22 }] } } }\n");
    await until("leftover on the edge", () => edgeTemplate("leftover"), 20_000);
    await until("settled", () => k.crd.sets.settled);
    await k.stop();
    kubectlOk(["-n", ns, "delete", "sbs", "leftover"]);
    kubectlOk(["-n", ns, "apply", "-f", "-"], `
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxSet
metadata: { name: offline }
spec:
  replicas: 1
  template: { spec: { containers: [{ name: sandbox, image: node:22 }] } }
`);
    expect(await edgeTemplate("offline")).toBeUndefined();
    k = await startKubeAgent(edge, ns, CLUSTER);
    const t = await until("template after restart", () => edgeTemplate("offline"), 20_000);
    expect(t.spec).toMatchObject({ replicas: 1, image: "node:22", cpuCount: 1, memoryMB: 512 });
    await until("leftover gone from the edge", async () => (await edgeTemplate("leftover")) === undefined, 20_000);
    await until("settled", () => k.crd.sets.settled);
    await until("its pod", () => podsOf("offline").length === 1, 30_000);
  });
});

describe("the agent's command line", () => {
  it("main.ts --driver kubernetes syncs its namespace's SandboxSets over the link", async () => {
    const other = await freshNamespace("sync-cli");
    await edge.bind(other, "kube-cli");
    const root = resolve(import.meta.dirname, "../..");
    const child = spawn(
      join(root, "node_modules/.bin/node"),
      ["controllers/agent/main.ts", "--driver", "kubernetes", "--kubeconfig", inject("kube").agentKubeconfig, "--namespace", other, "--cluster", "kube-cli", "--edge", edge.url, "--data-dir", join(edge.dir, "agent-cli")],
      { cwd: root, env: { ...process.env, CLUSTER_TOKEN: await edge.tokenOf("kube-cli") }, stdio: ["ignore", "pipe", "pipe"] },
    );
    let out = "";
    child.stdout!.on("data", (b: Buffer) => (out += b.toString()));
    child.stderr!.on("data", (b: Buffer) => (out += b.toString()));
    try {
      await until("agent connected", () => out.includes("connected to the edge"), 30_000);
      kubectlOk(["-n", other, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxSet\nmetadata: { name: cli }\nspec: { replicas: 0, template: { spec: { containers: [{ name: sandbox, image: node:22 }] } } }\n");
      const res = await until("template of team " + other, async () => {
        const r = await fetch(`${edge.url}/admin/teams/${other}/templates/cli`, { headers: { "x-api-key": edge.adminKey } });
        return r.ok ? ((await r.json()) as { spec: { cluster: string; image: string } }) : undefined;
      }, 20_000);
      expect(res.spec).toMatchObject({ cluster: "kube-cli", image: "node:22" });
    } finally {
      const exited = new Promise((ok) => child.once("exit", ok));
      child.kill("SIGTERM");
      await exited;
    }
  });
});
