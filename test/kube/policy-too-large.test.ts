// SecurityProfiles too large for a pod's Secret, from the edge's API down (the driver's half is in
// traffic-l7.test.ts): profiles PUT through the admin API (each within the API's body limit, the
// set over the 1 MiB an object may hold) reach the agent over its session; the running sandbox
// they select keeps the policy it had, with a PolicyTooLarge Warning Event on its Sandbox
// (kubectl), and a new sandbox they would select is refused at create (the E2B SDK's error names
// the cause), no pod made; a kubectl SecurityProfile selecting it is then Programmed False (its
// sidecar kept the old policy). The real edge (sqld + the Worker on workerd), the agent with its CRD
// link, the test kubelet and one real agent-runtime per pod.
import { Sandbox } from "e2b";
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LABEL } from "../../schema/crd/labels.ts";
import { startTestEdge, type TestEdge } from "./support/edge.ts";
import { runRuntimes, startKubeAgent, type KubeAgent } from "./support/kube-agent.ts";
import { TestKubelet } from "./support/kubelet.ts";
import { freshNamespace, kubeConfig, kubectlOk, until } from "./support/namespace.ts";
import { withSandboxSet } from "./support/sandbox-set.ts";

let edge: TestEdge;
let ns: string;
let kubelet: TestKubelet;
let k: KubeAgent;
let runtimes: { stop(): Promise<void> };

const admin = (path: string, init: RequestInit = {}) => fetch(`${edge.url}${path}`, { ...init, headers: { "x-api-key": edge.adminKey, "content-type": "application/json" } });

beforeAll(async () => {
  edge = await startTestEdge("toolarge");
  ns = await freshNamespace("toolarge");
  kubectlOk(["-n", ns, "apply", "-f", "-"], readFileSync("k8s/injection-config.yaml", "utf8").replace("namespace: sandbox-system", `namespace: ${ns}`));
  kubelet = new TestKubelet(kubeConfig(), ns);
  await kubelet.start();
  runtimes = await runRuntimes(ns);
  k = await startKubeAgent(edge, ns, "kube-toolarge");
  await until("injection config", () => k.driver.injection.current()["traffic-proxy"]);
  await withSandboxSet(ns, "pool", { replicas: 0 });
}, 120_000);

afterAll(async () => {
  await k?.stop().catch(() => {});
  await kubelet?.stop();
  await runtimes?.stop();
  await edge?.stop();
});

describe("SecurityProfiles too large for a pod, through the admin API", () => {
  it("the running sandbox keeps its policy with a PolicyTooLarge Event; a new one is refused at create with the cause", async () => {
    const key = ((await (await admin("/api-keys", { method: "POST", body: JSON.stringify({ name: "k", teamName: ns }) })).json()) as { key: string }).key;
    const put = (name: string, spec: unknown) => admin(`/admin/teams/${ns}/security-profiles/${name}`, { method: "PUT", body: JSON.stringify(spec) });
    expect((await put("big-0", { selector: { matchLabels: { app: "big" } }, rules: [{ name: "r", match: [{ domains: ["api.big.test"] }], actions: { block: {} } }] })).status).toBe(200);
    const opts = { apiKey: key, apiUrl: edge.url, sandboxUrl: edge.url, requestTimeoutMs: 60_000, metadata: { "label:app": "big" } };
    const sbx = await Sandbox.create("pool", opts);
    const pods = () => JSON.parse(kubectlOk(["-n", ns, "get", "pods", "-l", `${LABEL.sandboxId}=${sbx.sandboxId}`, "-o", "json"])) as { items: { metadata: { labels: Record<string, string> } }[] };
    expect(pods().items.map((p) => p.metadata.labels[LABEL.trafficProxy])).toEqual(["governed"]);
    // A profile from kubectl too: Programmed as far as the pods' sidecars apply it.
    kubectlOk(["-n", ns, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SecurityProfile\nmetadata: { name: crd-small }\nspec:\n  selector: { matchLabels: { app: big } }\n  rules: [{ name: r, match: [{ domains: [crd.big.test] }], actions: { block: {} } }]\n");
    type Cond = { type: string; status: string; reason: string; message: string };
    const programmed = () => (JSON.parse(kubectlOk(["-n", ns, "get", "securityprofiles.agents.kruise.io", "crd-small", "-o", "json"])) as { status?: { conditions?: Cond[] } }).status?.conditions?.find((c) => c.type === "Programmed");
    await until("Programmed in the one pod", () => programmed()?.message.includes("1 of the 1"), 60_000);
    expect(programmed()).toMatchObject({ status: "True" });

    // Six profiles of ~190 kB each (twelve 8000-byte header values per rule, two rules): each
    // within the API's 256 KiB body, together over what the pod's Secret may hold.
    const headers = Array.from({ length: 12 }, (_, i) => ({ name: `x-big-${i}`, value: "v".repeat(8000) }));
    const big = { selector: { matchLabels: { app: "big" } }, rules: [1, 2].map((r) => ({ name: `r${r}`, match: [{ domains: [`api${r}.big.test`] }], actions: { headerManipulation: { set: headers } } })) };
    for (let i = 1; i <= 6; i++) expect((await put(`big-${i}`, big)).status).toBe(200);

    const events = () => kubectlOk(["-n", ns, "get", "events", "--field-selector", "reason=PolicyTooLarge", "-o", "jsonpath={.items[*].message}"]);
    await until("the PolicyTooLarge Event", () => events().includes(sbx.sandboxId), 60_000);
    expect(events()).toMatch(/takes \d+ bytes in its pod's Secret, over the \d+ one object may hold.*keeps the policy it had/);
    // Still running, its pod as it was; its sidecar keeps the old policy, so the kubectl profile
    // is not in force there (it was: Programmed True) and says so.
    expect(await sbx.isRunning()).toBe(true);
    expect(pods().items).toHaveLength(1);
    await until("Programmed False", () => programmed()?.status === "False", 60_000);
    expect(programmed()!.message).toContain("0 of the 1");

    // A new sandbox the profiles would select: refused at create, the cause in the SDK's error.
    await expect(Sandbox.create("pool", opts)).rejects.toThrow(/over the \d+ one object may hold/);
    // No pod but the first one's.
    expect((JSON.parse(kubectlOk(["-n", ns, "get", "pods", "-o", "json"])) as { items: unknown[] }).items).toHaveLength(1);
    await sbx.kill();
  });
});
