// What the kubernetes driver puts on a sandbox's pod whatever its intent carries (review 25 H6),
// against the real API server: annotations under a Kubernetes, container-runtime or CNI prefix
// (an intent the edge took before it refused them) are not put on the pod, with a MetadataDropped
// Warning Event on the Sandbox; other annotations are; the pod runs under RuntimeDefault seccomp;
// its runtime reads its token from the pod's Secret, and the namespace has the ingress policy.
import { CoreV1Api, NetworkingV1Api, type V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KubernetesDriver, idLabel } from "../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { LABEL } from "../../schema/crd/labels.ts";
import { kubeDesired } from "./support/desired.ts";
import { freshNamespace, kubeConfig, kubectlOk, until } from "./support/namespace.ts";

let ns: string;
let driver: KubernetesDriver;
const core = () => kubeConfig().makeApiClient(CoreV1Api);

beforeAll(async () => {
  ns = await freshNamespace("podhard");
  kubectlOk(["-n", ns, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxSet\nmetadata: { name: py }\nspec:\n  replicas: 0\n  template: { spec: { containers: [{ name: sandbox, image: python:3.12 }] } }\n");
  driver = new KubernetesDriver({ kubeConfig: kubeConfig("agent"), namespace: ns, runtimeImage: "ghcr.io/kruise-edge/sandbox-agent:test", agentNamespace: "sandbox-system" });
  await driver.start();
});
afterAll(async () => {
  await driver?.stop();
});

describe("a sandbox pod", () => {
  it("drops platform-prefixed annotations with a Warning Event, runs RuntimeDefault seccomp, and reads its runtime token from its Secret", async () => {
    const annotations = { "container.apparmor.security.beta.kubernetes.io/sandbox": "unconfined", "k8s.v1.cni.cncf.io/networks": "kube-system/host-macvlan", "io.katacontainers.config.hypervisor.kernel_params": "x", "example.com/run": "42" };
    await driver.ensure(kubeDesired("hard1", { annotations }));
    const pod = await until("the pod", async () => (await core().listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=${idLabel("hard1")}` })).items[0] as V1Pod | undefined);
    expect(pod.metadata!.annotations?.["example.com/run"]).toBe("42");
    for (const k of Object.keys(annotations).filter((k) => k !== "example.com/run")) expect(pod.metadata!.annotations?.[k], k).toBeUndefined();
    expect(pod.spec!.securityContext?.seccompProfile).toEqual({ type: "RuntimeDefault" });
    const env = pod.spec!.containers.find((c) => c.name === "agent-runtime")!.env!;
    expect(env.find((e) => e.name === "RUNTIME_ACCESS_TOKEN")?.valueFrom?.secretKeyRef).toEqual({ name: `${pod.metadata!.name}-runtime`, key: "token" });
    const secret = await core().readNamespacedSecret({ namespace: ns, name: `${pod.metadata!.name}-runtime` });
    expect(Buffer.from(secret.data!.token!, "base64").toString()).toBe(driver.runtimeTokens("hard1").at(-1));
    const events = JSON.parse(kubectlOk(["-n", ns, "get", "events", "--field-selector", `involvedObject.name=${pod.metadata!.name},reason=MetadataDropped`, "-o", "json"])).items as { type: string; message: string }[];
    expect(events[0]?.type).toBe("Warning");
    expect(events[0]?.message).toMatch(/container\.apparmor\.security\.beta\.kubernetes\.io\/sandbox/);
    const np = await kubeConfig().makeApiClient(NetworkingV1Api).readNamespacedNetworkPolicy({ namespace: ns, name: "sandbox-runtime-ingress" });
    expect(np.spec!.ingress![0]!._from).toEqual([{ namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "sandbox-system" } } }]);
  });
});
