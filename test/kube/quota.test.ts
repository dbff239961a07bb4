// Team quotas with kubectl against the real edge (sqld + the Worker on workerd) over the agent's
// session: the platform team annotates the team's Namespace, the agent syncs it, the edge applies
// it as the admin API would (GET /admin/teams/{team}/quota shows it) and a create over it is 429.
// An invalid value is a Warning Event on the Namespace and changes nothing; removing the
// annotations returns the team to the defaults.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestEdge, type TestEdge } from "./support/edge.ts";
import { startKubeAgent, type KubeAgent } from "./support/kube-agent.ts";
import { freshNamespace, kubectlOk, until } from "./support/namespace.ts";

const CLUSTER = "kube-quota";
const P = "quota.agents.kruise.io";
let edge: TestEdge;
let ns: string;
let k: KubeAgent;

const admin = (path: string, init: RequestInit = {}) => fetch(`${edge.url}${path}`, { ...init, headers: { "x-api-key": edge.adminKey, "content-type": "application/json" } });
async function quota(): Promise<{ limits: Record<string, number | null>; overrides: Record<string, number> }> {
  const res = await admin(`/admin/teams/${ns}/quota`);
  if (!res.ok) throw new Error(`edge: ${res.status} ${await res.text()}`);
  return (await res.json()) as never;
}

beforeAll(async () => {
  edge = await startTestEdge("quota");
  ns = await freshNamespace("quota");
  k = await startKubeAgent(edge, ns, CLUSTER);
}, 120_000);

afterAll(async () => {
  await k?.stop().catch(() => {});
  await edge?.stop();
});

describe("team quota from the Namespace's annotations", () => {
  it("kubectl annotate ns → the edge's quota (the admin API shows it) → a create over it gets 429; an invalid value is an Event and changes nothing; removing it returns to the defaults", async () => {
    kubectlOk(["-n", ns, "apply", "-f", "-"], `
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxSet
metadata: { name: big }
spec:
  replicas: 0
  template: { spec: { containers: [{ name: sandbox, image: node:22, resources: { limits: { cpu: "2", memory: 1Gi } } }] } }
`);
    await until("template on the edge", async () => (await admin(`/admin/teams/${ns}/templates/big`)).ok, 20_000);
    const defaults = (await quota()).limits;
    const key = ((await (await admin("/api-keys", { method: "POST", body: JSON.stringify({ name: "k", teamName: ns }) })).json()) as { key: string }).key;

    kubectlOk(["annotate", "ns", ns, `${P}/running-sandboxes=10`, `${P}/vcpus=1`]);
    await until("quota on the edge", async () => (await quota()).overrides.vcpus === 1, 20_000);
    expect(await quota()).toMatchObject({ limits: { runningSandboxes: 10, vcpus: 1 }, overrides: { runningSandboxes: 10, vcpus: 1 } });

    const res = await fetch(`${edge.url}/v2/sandboxes`, { method: "POST", headers: { "x-api-key": key, "content-type": "application/json" }, body: JSON.stringify({ templateID: "big" }) });
    expect(res.status).toBe(429);
    expect(((await res.json()) as { message: string }).message).toContain("(quota vcpus)");

    kubectlOk(["annotate", "--overwrite", "ns", ns, `${P}/vcpus=lots`]);
    const events = () => kubectlOk(["-n", ns, "get", "events", "--field-selector", "reason=InvalidSandboxQuota", "-o", "jsonpath={.items[*].message}"]);
    await until("InvalidSandboxQuota event", () => events().includes(`${P}/vcpus`), 20_000);
    expect((await quota()).overrides).toEqual({ runningSandboxes: 10, vcpus: 1 });

    kubectlOk(["annotate", "ns", ns, `${P}/running-sandboxes-`, `${P}/vcpus-`]);
    await until("back to the defaults", async () => Object.keys((await quota()).overrides).length === 0, 20_000);
    expect((await quota()).limits).toEqual(defaults);
  });
});
