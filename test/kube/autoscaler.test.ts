// PoolAutoscaler sync over the agent link against the real edge (sqld + the Worker on workerd) and a
// real API server: a PoolAutoscaler applied with kubectl sizes its SandboxSet's pool on the edge
// (minReplicas, then a cron window's replicas), its status subresource shows the edge's last
// decision and conditions, each scale is a Kubernetes Event on it, a target the edge does not
// have is FailedGetTarget, an older generation is stale, and kubectl delete removes the autoscaler
// from the pool (also when it happened while the agent was down).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestEdge, type TestEdge } from "./support/edge.ts";
import { startKubeAgent, type KubeAgent } from "./support/kube-agent.ts";
import { TestKubelet } from "./support/kubelet.ts";
import { freshNamespace, kubeConfig, kubectlOk, until } from "./support/namespace.ts";

const CLUSTER = "kube-autoscale";
let edge: TestEdge;
let ns: string;
let kubelet: TestKubelet;
let k: KubeAgent;

interface PaStatus {
  observedGeneration?: number;
  desiredReplicas?: number;
  currentReplicas?: number;
  appliedCronPolicies?: { name: string }[];
  lastDecision?: { reason: string; message: string; desiredReplicas: number };
  conditions?: { type: string; status: string; reason: string; message: string; lastTransitionTime: string }[];
}

const podsOf = (pool: string) => kubectlOk(["-n", ns, "get", "pods", "-l", `agents.kruise.io/sandbox-pool=${pool}`, "-o", "name"]).trim().split("\n").filter(Boolean);
const paStatus = (name: string): PaStatus => (JSON.parse(kubectlOk(["-n", ns, "get", "pa", name, "-o", "json"])) as { status?: PaStatus }).status ?? {};
const events = (name: string) =>
  (JSON.parse(kubectlOk(["-n", ns, "get", "events", "--field-selector", `involvedObject.name=${name}`, "-o", "json"])) as { items: { reason: string; message: string; type: string; involvedObject: { kind: string } }[] }).items;

async function edgeAutoscaler(template: string): Promise<{ configured: boolean; desiredReplicas: number }> {
  const res = await fetch(`${edge.url}/admin/teams/${ns}/templates/${template}/autoscaler`, { headers: { "x-api-key": edge.adminKey } });
  if (!res.ok) throw new Error(`edge: ${res.status} ${await res.text()}`);
  return (await res.json()) as { configured: boolean; desiredReplicas: number };
}

const paYaml = (name: string, target: string, extra = "") => `
apiVersion: agents.kruise.io/v1alpha1
kind: PoolAutoscaler
metadata: { name: ${name} }
spec:
  scaleTargetRef: { kind: SandboxSet, name: ${target} }
  minReplicas: 2
  maxReplicas: 5
${extra}`;

beforeAll(async () => {
  edge = await startTestEdge("autoscale");
  ns = await freshNamespace("autoscale");
  kubelet = new TestKubelet(kubeConfig(), ns);
  await kubelet.start();
  k = await startKubeAgent(edge, ns, CLUSTER);
}, 120_000);

afterAll(async () => {
  await k?.stop().catch(() => {});
  await kubelet?.stop();
  await edge?.stop();
});

describe("PoolAutoscaler → edge over the agent link", () => {
  it("kubectl apply of a PoolAutoscaler scales its SandboxSet's pool to minReplicas; the status and an Event say why", async () => {
    kubectlOk(["-n", ns, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxSet\nmetadata: { name: pool }\nspec: { replicas: 0, template: { spec: { containers: [{ name: sandbox, image: node:22 }] } } }\n");
    kubectlOk(["-n", ns, "apply", "-f", "-"], paYaml("pool-pa", "pool"));
    await until("2 pool pods", () => podsOf("pool").length === 2, 30_000);
    expect(await edgeAutoscaler("pool")).toMatchObject({ configured: true, desiredReplicas: 2 });

    const st = await until("status written", () => {
      const s = paStatus("pool-pa");
      return s.desiredReplicas === 2 && s.lastDecision ? s : undefined;
    }, 20_000);
    expect(st.observedGeneration).toBe(1);
    expect(st.lastDecision).toMatchObject({ desiredReplicas: 2 });
    expect(st.lastDecision!.message).not.toBe("");
    expect(st.conditions).toContainEqual(expect.objectContaining({ type: "ScalingLimited", status: "True", reason: "TooFewReplicas" }));
    expect(st.conditions).toContainEqual(expect.objectContaining({ type: "AbleToScale", status: "True" }));

    const rescale = await until("a SuccessfulRescale Event", () => events("pool-pa").find((e) => e.reason === "SuccessfulRescale"), 20_000);
    expect(rescale).toMatchObject({ type: "Normal", involvedObject: { kind: "PoolAutoscaler" } });
    expect(rescale.message).toContain("2");
  });

  it("a cron window in effect sizes the pool to its replicas, and the status lists the policy", async () => {
    kubectlOk(["-n", ns, "apply", "-f", "-"], paYaml("pool-pa", "pool", "  cronPolicies: [{ name: always, schedule: '* * * * *', targetReplicas: 3 }]\n"));
    await until("3 pool pods", () => podsOf("pool").length === 3, 30_000);
    const st = await until("status of generation 2", () => {
      const s = paStatus("pool-pa");
      return s.observedGeneration === 2 && s.desiredReplicas === 3 ? s : undefined;
    }, 20_000);
    expect(st.appliedCronPolicies).toContainEqual(expect.objectContaining({ name: "always" }));
    await until("a CronPolicyActive Event", () => events("pool-pa").find((e) => e.reason === "CronPolicyActive"), 20_000);
    // One Event per scale, however often the status is read.
    expect(events("pool-pa").filter((e) => e.reason === "SuccessfulRescale").length).toBeLessThanOrEqual(2);
  });

  it("an older generation arriving late is stale (the edge keeps the newest)", async () => {
    const pa = k.crd.namespaces.get(ns)!;
    const obj = (await pa).autoscalers.autoscalers.get("pool-pa")!;
    const late = { namespace: ns, name: "pool-pa", uid: obj.metadata!.uid!, generation: obj.metadata!.generation! - 1, target: "pool", spec: { minReplicas: 0, maxReplicas: 1 } };
    expect((await k.agent.link.call({ type: "autoscalers", item: late })).result).toBe("stale");
    expect(await edgeAutoscaler("pool")).toMatchObject({ configured: true, desiredReplicas: 3 });
  });

  it("a PoolAutoscaler whose SandboxSet the edge does not have says FailedGetTarget", async () => {
    kubectlOk(["-n", ns, "apply", "-f", "-"], paYaml("orphan-pa", "missing"));
    const st = await until("FailedGetTarget", () => paStatus("orphan-pa").conditions?.find((c) => c.type === "AbleToScale" && c.status === "False"), 20_000);
    expect(st).toMatchObject({ reason: "FailedGetTarget" });
    expect(st.message).toContain("missing");
    kubectlOk(["-n", ns, "delete", "pa", "orphan-pa"]);
  });

  it("kubectl delete pa removes the autoscaler; the pool keeps its size", async () => {
    kubectlOk(["-n", ns, "delete", "pa", "pool-pa"]);
    await until("autoscaler gone from the edge", async () => !(await edgeAutoscaler("pool")).configured, 20_000);
    expect(podsOf("pool").length).toBe(3);
  });

  it("one deleted while the agent was down is removed from the edge after its restart", async () => {
    kubectlOk(["-n", ns, "apply", "-f", "-"], paYaml("again-pa", "pool"));
    await until("autoscaler on the edge", async () => (await edgeAutoscaler("pool")).configured, 20_000);
    await k.stop();
    kubectlOk(["-n", ns, "delete", "pa", "again-pa"]);
    expect((await edgeAutoscaler("pool")).configured).toBe(true);
    k = await startKubeAgent(edge, ns, CLUSTER);
    await until("autoscaler gone after the restart", async () => !(await edgeAutoscaler("pool")).configured, 20_000);
  });
});
