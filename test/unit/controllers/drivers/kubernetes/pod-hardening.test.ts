// What every sandbox pod gets whatever its template says (buildPod, pure; review 25 H2, H6): the
// agent-runtime reads its token from the pod's own Secret (a template's RUNTIME_ACCESS_TOKEN, a
// token the tenant would know before the claim, is replaced), and the pod runs under the
// container runtime's default seccomp filter unless the template chose a profile. The namespace's
// ingress policy admits the runtime ports from the agent's namespace only, every other port as before.
import type { V1PodSpec } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { buildPod } from "../../../../../controllers/drivers/kubernetes/pod-spec.ts";
import { podRuntimeToken, runtimeIngressPolicy } from "../../../../../controllers/drivers/kubernetes/runtime-token.ts";

const pod = (spec: V1PodSpec) =>
  buildPod({
    name: "s-abc",
    namespace: "ns",
    template: { metadata: {}, spec },
    volumeClaimTemplates: [],
    labels: {},
    owner: { apiVersion: "agents.kruise.io/v1alpha1", kind: "Sandbox", name: "s-abc", uid: "u" },
    runtimeImage: "rt:1",
    resources: { cpuCount: 1, memoryMB: 512 },
    runtimeTokenSecret: "s-abc-runtime",
  });
const runtimeEnv = (spec: V1PodSpec) => pod(spec).spec!.containers.find((c) => c.name === "agent-runtime")!.env;
const FROM_SECRET = { name: "RUNTIME_ACCESS_TOKEN", valueFrom: { secretKeyRef: { name: "s-abc-runtime", key: "token" } } };

describe("a sandbox pod's runtime token", () => {
  it("comes from the pod's Secret, for an injected runtime and for one the template declares with its own token", () => {
    expect(runtimeEnv({ containers: [{ name: "main", image: "img" }] })).toContainEqual(FROM_SECRET);
    const own = runtimeEnv({ containers: [{ name: "main", image: "img" }, { name: "agent-runtime", image: "rt:2", env: [{ name: "RUNTIME_ACCESS_TOKEN", value: "known-to-the-tenant" }, { name: "X", value: "1" }] }] });
    expect(own).toEqual([{ name: "X", value: "1" }, FROM_SECRET]);
  });

  it("differs per pod and per namespace, and is stable for a key (a restarted agent derives it again)", () => {
    const t = podRuntimeToken("k", "ns", "s-abc");
    expect(t).toBe(podRuntimeToken("k", "ns", "s-abc"));
    expect(new Set([t, podRuntimeToken("k", "ns", "s-abd"), podRuntimeToken("k", "ns2", "s-abc"), podRuntimeToken("k2", "ns", "s-abc")]).size).toBe(4);
    expect(t).toMatch(/^[A-Za-z0-9_-]{43}$/);
  });
});

describe("a sandbox pod's seccomp profile", () => {
  it("is RuntimeDefault unless the template chose one; other pod security settings are kept", () => {
    expect(pod({ containers: [{ name: "main", image: "img" }] }).spec!.securityContext).toEqual({ seccompProfile: { type: "RuntimeDefault" } });
    expect(pod({ securityContext: { runAsUser: 1000 }, containers: [{ name: "main", image: "img" }] }).spec!.securityContext).toEqual({ runAsUser: 1000, seccompProfile: { type: "RuntimeDefault" } });
    const chosen = { seccompProfile: { type: "Localhost", localhostProfile: "sandbox.json" } };
    expect(pod({ securityContext: chosen, containers: [{ name: "main", image: "img" }] }).spec!.securityContext).toEqual(chosen);
    // sudo keeps working: nothing forbids privilege escalation.
    for (const c of pod({ containers: [{ name: "main", image: "img" }] }).spec!.containers) expect(c.securityContext?.allowPrivilegeEscalation).toBeUndefined();
  });
});

describe("the namespace's ingress policy", () => {
  const np = runtimeIngressPolicy("team-a", "sandbox-system");
  const tcp = np.spec!.ingress![1]!.ports!.filter((p) => p.protocol === "TCP");
  const opens = (port: number) => tcp.some((p) => (p.port as number) <= port && port <= (p.endPort ?? (p.port as number)));

  it("selects the sandbox pods and admits everything from the agent's namespace", () => {
    expect(np.spec!.podSelector).toEqual({ matchLabels: { "agents.kruise.io/created-by": "sandbox" } });
    expect(np.spec!.ingress![0]).toEqual({ _from: [{ namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "sandbox-system" } } }] });
  });

  it("opens every TCP port but the runtime's, the interpreter's and the proxy's health port to others", () => {
    for (const p of [49983, 49999, 15021]) expect(opens(p), String(p)).toBe(false);
    for (const p of [1, 80, 3000, 15020, 15022, 49982, 49984, 49998, 50000, 65535]) expect(opens(p), String(p)).toBe(true);
    expect(np.spec!.ingress![1]!.ports).toContainEqual({ protocol: "UDP", port: 1, endPort: 65535 });
  });
});
