// A template's `nestedUserNamespaces` on the kubernetes driver (pod-spec.ts seccompFor): where the
// template's pod names no seccomp profile, its pods get the container runtime's default profile,
// which refuses new user namespaces as the local driver's filter does, and the operator's opt-in
// gets Unconfined; a profile the template names itself stays. What kubectl shows of the pods.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { idLabel, KubernetesDriver, type KubeDesiredSandbox } from "../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { LABEL } from "../../schema/crd/labels.ts";
import { freshNamespace, kubeConfig, kubectlOk, until } from "./support/namespace.ts";

let ns: string;
let driver: KubernetesDriver;
let generation = 1;

function desired(id: string, template: string, over: Partial<KubeDesiredSandbox> = {}): KubeDesiredSandbox {
  return { id, generation: generation++, template, state: "Running", pauseStrategy: "Stop", resources: { cpuCount: 1, memoryMB: 512 }, allowInternetAccess: true, pool: template, claimed: false, ...over };
}

/** The pod of sandbox `id` as kubectl shows it: its pod-level and per-container seccomp profiles. */
function seccompOf(id: string): { pod: unknown; containers: unknown[] } {
  const pods = JSON.parse(kubectlOk(["-n", ns, "get", "pods", "-l", `${LABEL.sandboxId}=${idLabel(id)}`, "-o", "json"])).items as { spec: { securityContext?: { seccompProfile?: unknown }; containers: { securityContext?: { seccompProfile?: unknown } }[] } }[];
  expect(pods).toHaveLength(1);
  const spec = pods[0]!.spec;
  return { pod: spec.securityContext?.seccompProfile, containers: spec.containers.map((c) => c.securityContext?.seccompProfile) };
}

beforeAll(async () => {
  ns = await freshNamespace("seccomp");
  kubectlOk(["-n", ns, "apply", "-f", "-"], `
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxSet
metadata: { name: plain }
spec:
  replicas: 0
  template:
    spec:
      containers: [{ name: sandbox, image: python:3.12 }]
---
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxSet
metadata: { name: own }
spec:
  replicas: 0
  template:
    spec:
      containers: [{ name: sandbox, image: python:3.12, securityContext: { seccompProfile: { type: Localhost, localhostProfile: profiles/userns.json } } }]
`);
  driver = new KubernetesDriver({ kubeConfig: kubeConfig("agent"), namespace: ns, runtimeImage: "ghcr.io/kruise-edge/sandbox-agent:test", onRequest: () => {} });
  await driver.start();
});

afterAll(async () => {
  await driver?.stop();
});

describe("a template's nestedUserNamespaces on the kubernetes driver", () => {
  it("a pod gets RuntimeDefault without it, Unconfined with it, and a template's own profile either way", async () => {
    await driver.ensure(desired("plainno", "plain"));
    await driver.ensure(desired("plainyes", "plain", { nestedUserNamespaces: true }));
    await driver.ensure(desired("ownno", "own"));
    await driver.ensure(desired("ownyes", "own", { nestedUserNamespaces: true }));
    await until("four pods", () => JSON.parse(kubectlOk(["-n", ns, "get", "pods", "-o", "json"])).items.length === 4 || undefined);
    expect(seccompOf("plainno")).toEqual({ pod: { type: "RuntimeDefault" }, containers: [undefined, undefined] });
    expect(seccompOf("plainyes")).toEqual({ pod: { type: "Unconfined" }, containers: [undefined, undefined] });
    const own = { type: "Localhost", localhostProfile: "profiles/userns.json" };
    expect(seccompOf("ownno")).toEqual({ pod: undefined, containers: [own, undefined] });
    expect(seccompOf("ownyes")).toEqual({ pod: undefined, containers: [own, undefined] });
  });
});
