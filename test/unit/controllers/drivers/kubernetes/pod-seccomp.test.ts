// buildPod's seccomp profile (pod-spec.ts seccompFor, pure): where the template names none, a
// template's `nestedUserNamespaces` decides it (RuntimeDefault refuses new user namespaces, as the
// local driver's filter does; the operator's opt-in gets Unconfined); a profile the template names
// for the pod or any container stays, and nothing else of its security context changes.
import type { V1PodSpec } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { buildPod } from "../../../../../controllers/drivers/kubernetes/pod-spec.ts";

const build = (spec: V1PodSpec, nestedUserNamespaces?: boolean) =>
  buildPod({
    name: "s-abc",
    namespace: "ns",
    template: { metadata: {}, spec },
    volumeClaimTemplates: [],
    labels: { "agents.kruise.io/sandbox-id": "abc" },
    owner: { apiVersion: "agents.kruise.io/v1alpha1", kind: "Sandbox", name: "s-abc", uid: "u" },
    runtimeImage: "rt:1",
    resources: { cpuCount: 1, memoryMB: 512 },
    ...(nestedUserNamespaces !== undefined ? { nestedUserNamespaces } : {}),
  }).spec!;

describe("buildPod's seccomp profile", () => {
  it("is RuntimeDefault for a template that names none, Unconfined with nestedUserNamespaces", () => {
    const plain = { securityContext: { runAsUser: 1000 }, containers: [{ name: "main", image: "img" }] };
    expect(build(plain).securityContext).toEqual({ runAsUser: 1000, seccompProfile: { type: "RuntimeDefault" } });
    expect(build(plain, false).securityContext?.seccompProfile).toEqual({ type: "RuntimeDefault" });
    expect(build(plain, true).securityContext).toEqual({ runAsUser: 1000, seccompProfile: { type: "Unconfined" } });
    expect(plain.securityContext).toEqual({ runAsUser: 1000 }); // the template is not changed
  });

  it("leaves a profile the template names, for the pod or for any of its containers", () => {
    const pod: V1PodSpec = { securityContext: { seccompProfile: { type: "Localhost", localhostProfile: "p.json" } }, containers: [{ name: "main", image: "img" }] };
    expect(build(pod, true).securityContext).toEqual(pod.securityContext);
    expect(build(pod, false).securityContext).toEqual(pod.securityContext);
    const init: V1PodSpec = { initContainers: [{ name: "setup", image: "img", securityContext: { seccompProfile: { type: "Unconfined" } } }], containers: [{ name: "main", image: "img" }] };
    expect(build(init, false).securityContext).toBeUndefined();
    expect(build(init, false).initContainers![0]!.securityContext).toEqual({ seccompProfile: { type: "Unconfined" } });
  });
});
