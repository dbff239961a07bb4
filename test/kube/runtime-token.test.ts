// A warm pool member's runtime is never open (review 25 H2). Before, a pod's agent-runtime had no
// token until its claim's /init, so anything on the pod network (another team's sandbox) could
// run commands in a warm member, or take /init first. Now each pod's runtime reads its token from
// the pod's Secret `<pod>-runtime` (the test's runtime launcher resolves the secretKeyRef as a
// kubelet does) and refuses everything but /health without it; the claim's /init presents it and
// sets the claim's token, and the pod's stops working. The namespace gets an ingress
// NetworkPolicy admitting the runtime ports from the agent's namespace only (not enforced here:
// no CNI). The real edge, the agent (in-process, as main.ts builds it), the test kubelet and one
// real agent-runtime per pod.
import { CoreV1Api, NetworkingV1Api, type V1Pod } from "@kubernetes/client-node";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ANNOTATION, LABEL } from "../../schema/crd/labels.ts";
import { startTestEdge, type TestEdge } from "./support/edge.ts";
import { runRuntimes, startKubeAgent, type KubeAgent } from "./support/kube-agent.ts";
import { TestKubelet } from "./support/kubelet.ts";
import { freshNamespace, kubeConfig, until } from "./support/namespace.ts";
import { withSandboxSet } from "./support/sandbox-set.ts";

let edge: TestEdge;
let ns: string;
let kubelet: TestKubelet;
let k: KubeAgent;
let runtimes: { stop(): Promise<void> };
const core = () => kubeConfig().makeApiClient(CoreV1Api);

beforeAll(async () => {
  edge = await startTestEdge("rttoken");
  ns = await freshNamespace("rttoken");
  kubelet = new TestKubelet(kubeConfig(), ns);
  await kubelet.start();
  runtimes = await runRuntimes(ns);
  k = await startKubeAgent(edge, ns, "kube-rttoken");
}, 120_000);

afterAll(async () => {
  await k?.stop().catch(() => {});
  await kubelet?.stop();
  await runtimes?.stop();
  await edge?.stop();
});

const warmPod = async (): Promise<V1Pod & { url: string }> => {
  const pods = (await core().listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.claimed}=false` })).items;
  const p = pods.find((x) => x.metadata?.annotations?.[ANNOTATION.runtimeUrl] && x.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True"));
  return p ? Object.assign(p, { url: p.metadata!.annotations![ANNOTATION.runtimeUrl]! }) : (undefined as never);
};

const secretToken = async (pod: string) => Buffer.from((await core().readNamespacedSecret({ namespace: ns, name: `${pod}-runtime` })).data!.token!, "base64").toString();

describe("a pod's runtime token", () => {
  it("a warm member refuses requests without its pod's token; the claim rotates it to the claim's", async () => {
    await withSandboxSet(ns, "pool", { replicas: 1, available: 1 });
    const pod = await until("a ready warm pod with a runtime", warmPod, 60_000);
    const name = pod.metadata!.name!;
    // The runtime container reads it from the pod's own Secret.
    const env = pod.spec!.containers.find((c) => c.name === "agent-runtime")!.env!;
    expect(env.find((e) => e.name === "RUNTIME_ACCESS_TOKEN")?.valueFrom?.secretKeyRef).toEqual({ name: `${name}-runtime`, key: "token" });
    const podToken = await secretToken(name);
    expect(podToken.length).toBeGreaterThanOrEqual(32);

    // What another team's sandbox on the pod network would send: no token.
    expect((await fetch(`${pod.url}/health`)).status).toBeLessThan(300);
    expect((await fetch(`${pod.url}/envs`)).status).toBe(401);
    const init = await fetch(`${pod.url}/init`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ accessToken: "attacker" }) });
    expect(init.status).toBe(401);
    const start = await fetch(`${pod.url}/process.Process/Start`, { method: "POST", headers: { "content-type": "application/json", "connect-protocol-version": "1" }, body: JSON.stringify({ process: { cmd: "/bin/true" } }) });
    expect(start.status).toBe(401);
    expect((await fetch(`${pod.url}/envs`, { headers: { "x-access-token": podToken } })).status).toBe(200);

    // The claim: the SDK's create takes the warm member; its /init presented the pod's token.
    const key = ((await (await fetch(`${edge.url}/api-keys`, { method: "POST", headers: { "x-api-key": edge.adminKey, "content-type": "application/json" }, body: JSON.stringify({ name: "k", teamName: ns }) })).json()) as { key: string }).key;
    const sbx = await Sandbox.create("pool", { apiKey: key, apiUrl: edge.url, sandboxUrl: edge.url, requestTimeoutMs: 60_000 });
    try {
      expect((await sbx.commands.run("echo claimed")).stdout).toContain("claimed");
      const claimed = (await core().listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=${sbx.sandboxId}` })).items[0]!;
      expect(claimed.metadata!.name).toBe(name);
      // Rotated: the pod's token no longer opens it.
      expect((await fetch(`${pod.url}/envs`, { headers: { "x-access-token": podToken } })).status).toBe(401);
    } finally {
      await sbx.kill();
    }

    // The namespace's ingress policy: the runtime ports from the agent's namespace only.
    const np = await kubeConfig().makeApiClient(NetworkingV1Api).readNamespacedNetworkPolicy({ namespace: ns, name: "sandbox-runtime-ingress" });
    expect(np.spec!.policyTypes).toEqual(["Ingress"]);
    expect(np.spec!.ingress![0]!._from).toEqual([{ namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "sandbox-system" } } }]);
    const open = np.spec!.ingress![1]!.ports!.filter((p) => p.protocol === "TCP");
    for (const port of [49983, 49999, 15021]) expect(open.some((p) => (p.port as number) <= port && port <= (p.endPort ?? (p.port as number)))).toBe(false);
    expect(open.some((p) => (p.port as number) <= 8080 && 8080 <= p.endPort!)).toBe(true);
  });
});
