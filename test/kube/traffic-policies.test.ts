// TrafficPolicy and GlobalTrafficPolicy with kubectl against the real edge (sqld + the Worker on
// workerd) over the agent's session: an applied object becomes the edge's policy (the admin API
// shows it), its status lists the sandboxes it selects (a sandbox made through the E2B API with a
// matching `label:` metadata) with Accepted True; what this platform does not enforce (ingress
// rules, service peers) is Accepted False, never enforced in part; kubectl delete removes it. A
// SecurityProfile the edge accepts is Programmed as far as the pods' traffic-proxies apply it; one
// named as an admin-API profile is refused on the object (the edge's 409), the admin's kept.
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestEdge, type TestEdge } from "./support/edge.ts";
import { runRuntimes, startKubeAgent, type KubeAgent } from "./support/kube-agent.ts";
import { TestKubelet } from "./support/kubelet.ts";
import { freshNamespace, kubeConfig, kubectlOk, until } from "./support/namespace.ts";
import { withSandboxSet } from "./support/sandbox-set.ts";

const CLUSTER = "kube-traffic";
let edge: TestEdge;
let ns: string;
let kubelet: TestKubelet;
let k: KubeAgent;
let runtimes: { stop(): Promise<void> };

interface Status {
  observedGeneration?: number;
  selectedSandboxes?: string[];
  conditions?: { type: string; status: string; reason: string; message: string }[];
}
const admin = (path: string, init: RequestInit = {}) => fetch(`${edge.url}${path}`, { ...init, headers: { "x-api-key": edge.adminKey, "content-type": "application/json" } });
const status = (kind: string, name: string, namespaced = true): Status =>
  (JSON.parse(kubectlOk([...(namespaced ? ["-n", ns] : []), "get", kind, name, "-o", "json"])) as { status?: Status }).status ?? {};

beforeAll(async () => {
  // This cluster writes GlobalTrafficPolicies: the edge takes them only from a cluster it names.
  edge = await startTestEdge("traffic", { vars: { GLOBAL_POLICY_CLUSTERS: CLUSTER } });
  ns = await freshNamespace("traffic");
  kubelet = new TestKubelet(kubeConfig(), ns);
  await kubelet.start();
  runtimes = await runRuntimes(ns);
  k = await startKubeAgent(edge, ns, CLUSTER);
  await withSandboxSet(ns, "pool", { replicas: 1, available: 1 });
}, 120_000);

afterAll(async () => {
  kubectlOk(["delete", "gtp", `${ns}-baseline`, `${ns}-bytemplate`, "--ignore-not-found"]);
  await k?.stop().catch(() => {});
  await kubelet?.stop();
  await runtimes?.stop();
  await edge?.stop();
});

describe("traffic policies from CRDs", () => {
  it("kubectl apply → the edge's policy → status lists the selected sandboxes; unsupported parts are refused whole; delete removes it", async () => {
    const key = ((await (await admin("/api-keys", { method: "POST", body: JSON.stringify({ name: "k", teamName: ns }) })).json()) as { key: string }).key;
    const sbx = await Sandbox.create("pool", { apiKey: key, apiUrl: edge.url, sandboxUrl: edge.url, requestTimeoutMs: 30_000, metadata: { "label:app": "web" } });
    const sandboxId = sbx.sandboxId;

    kubectlOk(["-n", ns, "apply", "-f", "-"], `
apiVersion: agents.kruise.io/v1alpha1
kind: TrafficPolicy
metadata: { name: web-egress }
spec:
  priority: 10
  selector: { matchLabels: { app: web } }
  egress:
    rules:
      - { action: allow, to: [{ fqdn: "*.pypi.test" }], ports: [{ port: 443 }] }
      - { action: reject, to: [{ cidr: 0.0.0.0/0 }] }
`);
    const st = await until("status written", () => {
      const s = status("tp", "web-egress");
      return s.selectedSandboxes?.length ? s : undefined;
    }, 30_000);
    expect(st).toMatchObject({ observedGeneration: 1, selectedSandboxes: [sandboxId] });
    expect(st.conditions).toEqual([expect.objectContaining({ type: "Accepted", status: "True" })]);
    const onEdge = (await (await admin(`/admin/teams/${ns}/traffic-policies/web-egress`)).json()) as { spec: { priority: number; egress: { rules: unknown[] } } };
    expect(onEdge.spec.priority).toBe(10);
    expect(onEdge.spec.egress.rules).toHaveLength(2);

    kubectlOk(["apply", "-f", "-"], `
apiVersion: agents.kruise.io/v1alpha1
kind: GlobalTrafficPolicy
metadata: { name: ${ns}-baseline }
spec:
  # A global policy sees only the platform's labels (review 25 M4): the template's, not label:app,
  # and the team's (review 26 H2: by template alone it is refused, Unsupported).
  selector: { matchLabels: { agents.kruise.io/sandbox-template: pool, agents.kruise.io/sandbox-team: ${ns} } }
  egress: { rules: [{ action: reject, to: [{ cidr: 10.0.0.0/8 }] }] }
`);
    const g = await until("global status", () => {
      const s = status("gtp", `${ns}-baseline`, false);
      return s.selectedSandboxes?.includes(sandboxId) ? s : undefined;
    }, 30_000);
    expect(g.conditions?.[0]).toMatchObject({ type: "Accepted", status: "True" });

    // Parts this platform does not enforce: refused whole, and the edge drops its earlier version.
    kubectlOk(["-n", ns, "apply", "-f", "-"], `
apiVersion: agents.kruise.io/v1alpha1
kind: TrafficPolicy
metadata: { name: web-egress }
spec:
  selector: { matchLabels: { app: web } }
  egress: { rules: [{ action: allow, to: [{ service: { name: db } }] }] }
`);
    const refused = await until("refused", () => {
      const s = status("tp", "web-egress");
      return s.observedGeneration === 2 && s.conditions?.[0]?.status === "False" ? s : undefined;
    }, 30_000);
    expect(refused.conditions?.[0]).toMatchObject({ reason: "Unsupported", message: expect.stringContaining("service and workload peers") });
    await until("gone from the edge", async () => (await admin(`/admin/teams/${ns}/traffic-policies/web-egress`)).status === 404, 20_000);

    // A global one naming the template but not the teams: any team may name a template "pool"
    // (review 26 H2), so it is refused whole, and never reaches the edge.
    kubectlOk(["apply", "-f", "-"], `
apiVersion: agents.kruise.io/v1alpha1
kind: GlobalTrafficPolicy
metadata: { name: ${ns}-bytemplate }
spec:
  selector: { matchLabels: { agents.kruise.io/sandbox-template: pool } }
  egress: { rules: [{ action: allow, to: [{ cidr: 10.0.0.0/8 }] }] }
`);
    const byTemplate = await until("template-only refused", () => {
      const s = status("gtp", `${ns}-bytemplate`, false);
      return s.conditions?.[0]?.status === "False" ? s : undefined;
    }, 30_000);
    expect(byTemplate.conditions?.[0]).toMatchObject({ reason: "Unsupported", message: expect.stringContaining("must also name the teams (agents.kruise.io/sandbox-team") });
    expect((await admin(`/admin/global-traffic-policies/${ns}-bytemplate`)).status).toBe(404);
    kubectlOk(["delete", "gtp", `${ns}-bytemplate`]);

    kubectlOk(["delete", "gtp", `${ns}-baseline`]);
    await until("global gone from the edge", async () => (await admin(`/admin/global-traffic-policies/${ns}-baseline`)).status === 404, 20_000);
  });

  it("a SecurityProfile: Accepted by the edge, and Programmed as the pods' traffic-proxies apply it (none selected here)", async () => {
    kubectlOk(["-n", ns, "apply", "-f", "-"], `
apiVersion: agents.kruise.io/v1alpha1
kind: SecurityProfile
metadata: { name: block-admin }
spec:
  selector: { matchLabels: { app: none-here } }
  rules:
    - { name: admin, match: [{ domains: [api.example.test], paths: [{ type: Prefix, value: /admin }] }], actions: { block: {} } }
`);
    const st = await until("profile status", () => {
      const s = status("securityprofiles.agents.kruise.io", "block-admin");
      return s.conditions?.length ? s : undefined;
    }, 30_000);
    expect(st.conditions!.map((c) => [c.type, c.status, c.reason])).toEqual([
      ["Accepted", "True", "Accepted"],
      ["Programmed", "True", "Programmed"],
    ]);
    expect(st.conditions![1]!.message).toContain("no running pod selected");
    expect(kubectlOk(["-n", ns, "get", "events", "--field-selector", "involvedObject.name=block-admin,reason=NotEnforcedByDriver", "-o", "name"]).trim()).toBe("");
    kubectlOk(["-n", ns, "delete", "securityprofiles.agents.kruise.io", "block-admin"]);
  });

  it("a SecurityProfile named as one the admin API made is refused (the edge's 409 as its Accepted condition); the admin's stays as it was", async () => {
    const spec = { rules: [{ name: "mine", match: [{ domains: ["admin.example.test"] }], actions: { block: {} } }] };
    expect((await admin(`/admin/teams/${ns}/security-profiles/held`, { method: "PUT", body: JSON.stringify(spec) })).status).toBe(200);
    kubectlOk(["-n", ns, "apply", "-f", "-"], `
apiVersion: agents.kruise.io/v1alpha1
kind: SecurityProfile
metadata: { name: held }
spec:
  rules:
    - { name: theirs, match: [{ domains: [cluster.example.test] }], actions: { block: {} } }
`);
    const accepted = await until("the refusal on the object", () => status("securityprofiles.agents.kruise.io", "held").conditions?.find((c) => c.type === "Accepted"), 30_000);
    expect(accepted).toMatchObject({ status: "False", message: expect.stringContaining("made through the admin API") });
    const kept = (await (await admin(`/admin/teams/${ns}/security-profiles/held`)).json()) as { spec: { rules: { name: string }[] } };
    expect(kept.spec.rules.map((r) => r.name)).toEqual(["mine"]);
    // Deleting the object does not delete the admin's profile either.
    kubectlOk(["-n", ns, "delete", "securityprofiles.agents.kruise.io", "held"]);
    expect((await admin(`/admin/teams/${ns}/security-profiles/held`)).status).toBe(200);
  });
});
