// Where the agent sends a pod's sandbox token, env and ingress requests (runtimeUrl, pure): the pod's
// own IP. The runtime-url annotation is a test kubelet's (KRUISE_TEST_RUNTIME_URL_ANNOTATION, unset
// here as in any deployment): a template or anyone who may annotate the pod must not point the agent
// at another address (the cluster's API, a metadata service) and have it send the token there.
import { describe, expect, it } from "vitest";
import { buildPod, runtimeUrl } from "../../../../../controllers/drivers/kubernetes/pod-spec.ts";
import { ANNOTATION } from "../../../../../schema/crd/labels.ts";

const build = (annotations: Record<string, string>) =>
  buildPod({
    name: "s-abc",
    namespace: "ns",
    template: { metadata: { annotations }, spec: { containers: [{ name: "main", image: "img" }] } },
    volumeClaimTemplates: [],
    labels: { "agents.kruise.io/sandbox-id": "abc" },
    owner: { apiVersion: "agents.kruise.io/v1alpha1", kind: "Sandbox", name: "s-abc", uid: "u" },
    runtimeImage: "rt:1",
    resources: { cpuCount: 1, memoryMB: 512 },
  });

describe("runtimeUrl outside a test kubelet", () => {
  it("is the pod's IP even when an annotation names another address, and nothing before the pod has one", () => {
    const pod = build({});
    pod.metadata!.annotations = { [ANNOTATION.runtimeUrl]: "http://169.254.169.254/latest" };
    expect(runtimeUrl(pod)).toBeUndefined();
    pod.status = { podIP: "10.1.2.3" };
    expect(runtimeUrl(pod)).toBe("http://10.1.2.3:49983");
  });

  it("a template's runtime-url annotation does not reach its pods; its other annotations do", () => {
    const pod = build({ [ANNOTATION.runtimeUrl]: "http://kubernetes.default.svc", team: "x" });
    expect(pod.metadata!.annotations).toEqual({ team: "x" });
  });
});
