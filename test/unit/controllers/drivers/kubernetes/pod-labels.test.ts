// A pod's labels (buildPod, pure): the template's own labels travel, but not the agent's reserved
// `agents.kruise.io/` keys, which say what the agent made: a template that writes
// `traffic-proxy: governed` does not make a pod without the proxy look governed (hasTrafficProxy).
import { describe, expect, it } from "vitest";
import { buildPod } from "../../../../../controllers/drivers/kubernetes/pod-spec.ts";
import { hasTrafficProxy } from "../../../../../controllers/drivers/kubernetes/traffic-objects.ts";

const pod = (labels: Record<string, string>) =>
  buildPod({
    name: "s-abc",
    namespace: "ns",
    template: { metadata: { labels }, spec: { containers: [{ name: "main", image: "img" }] } },
    volumeClaimTemplates: [],
    labels: { "agents.kruise.io/sandbox-id": "abc" },
    owner: { apiVersion: "agents.kruise.io/v1alpha1", kind: "Sandbox", name: "s-abc", uid: "u" },
    runtimeImage: "rt:1",
    resources: { cpuCount: 1, memoryMB: 512 },
  });

describe("buildPod labels", () => {
  it("drops the template's reserved agents.kruise.io/ labels (a faked traffic-proxy marker, pool, claim) and keeps its own", () => {
    const p = pod({ app: "a", "agents.kruise.io/traffic-proxy": "governed", "agents.kruise.io/sandbox-claimed": "true", "agents.kruise.io/sandbox-id": "victim" });
    expect(p.metadata!.labels).toEqual({ app: "a", "agents.kruise.io/sandbox-id": "abc", "agents.kruise.io/created-by": "sandbox" });
    expect(hasTrafficProxy(p)).toBe(false);
    expect(hasTrafficProxy(p, true)).toBe(false);
  });
});
