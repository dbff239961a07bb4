// The agent's stored SecurityProfile set (policy-store.ts, Secret `sandbox-security-profiles`)
// against the real API server, which refuses an object whose data passes 1 MiB (422): a set of 200
// profiles of 50 rules (2.7 MB of JSON) is stored, gzipped, and a restarted agent builds a new pod
// from it before the edge sends anything; a set that does not fit even gzipped (incompressible
// literal values) is not stored and the older stored set is deleted with it, so a restarted agent
// never builds pods from a set older than the one in force.
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { CoreV1Api } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KubernetesDriver, type KubeDesiredSandbox } from "../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { PolicySetStore, PROFILES } from "../../controllers/drivers/kubernetes/policy-store.ts";
import { SecurityProfileSpec, type SecurityProfileEntry } from "../../schema/api/security-profile.ts";
import { TestKubelet } from "./support/kubelet.ts";
import { freshNamespace, kubeConfig, kubectl, kubectlOk, until } from "./support/namespace.ts";

let ns: string;
let kubelet: TestKubelet;
const drivers: KubernetesDriver[] = [];
const logs: string[] = [];

function desired(id: string, over: Partial<KubeDesiredSandbox> = {}): KubeDesiredSandbox {
  return { id, generation: 1, template: "plain", pool: "plain", namespace: ns, state: "Running", pauseStrategy: "Stop", resources: { cpuCount: 1, memoryMB: 512 }, allowInternetAccess: true, claimed: true, ...over };
}

/** An agent's driver as a (re)started agent makes it; the edge has sent nothing yet. */
async function agent(): Promise<KubernetesDriver> {
  for (const d of drivers.splice(0)) await d.stop();
  const d = new KubernetesDriver({ kubeConfig: kubeConfig("agent"), namespace: ns, runtimeImage: "ghcr.io/kruise-edge/sandbox-agent:test", log: (line) => logs.push(line) });
  drivers.push(d);
  await d.start();
  await until("set and injection config", () => d.sandboxSets.get("plain") && d.injection.current()["traffic-proxy"]);
  await d.setTrafficPolicies([]);
  return d;
}

/** 200 profiles of 50 rules, each with a literal header value; only `web` selects app=web. */
function profileSet(value: (p: number, r: number) => string): SecurityProfileEntry[] {
  const rule = (p: number, r: number) => ({ name: `r${r}`, match: [{ domains: [`host-${r}.example.com`, `*.svc-${r}.example.net`], paths: [{ type: "Prefix", value: `/api/v1/resource-${r}` }] }], actions: { headerManipulation: { set: [{ name: "x-platform-token", value: value(p, r) }] } } });
  const many = Array.from({ length: 199 }, (_, p) => ({ team: ns, name: `p${p}`, spec: SecurityProfileSpec.parse({ selector: { matchLabels: { app: "nobody" } }, rules: Array.from({ length: 50 }, (_, r) => rule(p, r)) }), createdAt: 1 }));
  return [...many, { team: ns, name: "web", spec: SecurityProfileSpec.parse({ selector: { matchLabels: { app: "web" } }, rules: [{ name: "tag", match: [{ domains: ["api.test"] }], actions: { headerManipulation: { set: [{ name: "x-web", value: "1" }] } } }] }), createdAt: 1 }];
}

const stored = () => new PolicySetStore(kubeConfig("agent").makeApiClient(CoreV1Api), ns, () => {}, PROFILES).load();
const l7Of = (pod: string) => JSON.parse(Buffer.from((JSON.parse(kubectlOk(["-n", ns, "get", "secret", `${pod}-traffic`, "-o", "json"])) as { data: Record<string, string> }).data["l7.json"]!, "base64").toString()) as { securityProfiles?: { name: string }[] };

beforeAll(async () => {
  ns = await freshNamespace("pstore");
  kubectlOk(["-n", ns, "apply", "-f", "-"], readFileSync("k8s/injection-config.yaml", "utf8").replace("namespace: sandbox-system", `namespace: ${ns}`));
  kubectlOk(["-n", ns, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxSet\nmetadata: { name: plain }\nspec:\n  replicas: 0\n  template: { spec: { containers: [{ name: sandbox, image: python:3.12 }] } }\n");
  kubelet = new TestKubelet(kubeConfig(), ns);
  await kubelet.start();
});

afterAll(async () => {
  for (const d of drivers) await d.stop();
  await kubelet?.stop();
});

describe("the agent's stored SecurityProfile set", () => {
  it("a set of 2.7 MB is stored, and a restarted agent builds a new pod from it before the edge sends it", async () => {
    const set = profileSet((p, r) => `literal-${p}-${r}-${"t".repeat(40)}`);
    expect(JSON.stringify(set).length).toBeGreaterThan(2 * 1024 * 1024);
    await (await agent()).setSecurityProfiles(set);
    expect(logs.filter((l) => l.includes("not stored"))).toEqual([]);
    expect((await stored())?.map((p) => p.name)).toEqual(set.map((p) => p.name));

    const restarted = await agent();
    await restarted.ensure(desired("web1", { labels: { app: "web" } }));
    const pod = JSON.parse(kubectlOk(["-n", ns, "get", "pod", "plain-web1", "-o", "json"])) as { metadata: { labels: Record<string, string> } };
    expect(pod.metadata.labels["agents.kruise.io/traffic-proxy"]).toBe("governed");
    expect(l7Of("plain-web1").securityProfiles?.map((p) => p.name)).toEqual(["web"]);
  });

  it("a set that does not fit even gzipped is not stored, the older one goes with it, and the agent says why", async () => {
    const d = drivers[0]!;
    // Incompressible literal values: ~1.6 MB in the Secret, gzipped.
    const set = profileSet((p, r) => (p < 6 ? randomBytes(4096).toString("base64") : `v-${p}-${r}`));
    await d.setSecurityProfiles(set);
    expect(logs.filter((l) => l.includes("not stored"))).toEqual([expect.stringMatching(/^security profiles not stored: the set of 200 takes \d+ bytes of JSON, \d+ gzipped, over what a Secret holds: not stored, and the stored one deleted/)]);
    expect(kubectl(["-n", ns, "get", "secret", "sandbox-security-profiles"]).status).not.toBe(0);
    expect(await stored()).toBeUndefined();
    // In force in this agent all the same: the edge's set is what it enforces.
    await d.ensure(desired("web2", { labels: { app: "web" } }));
    expect(l7Of("plain-web2").securityProfiles?.map((p) => p.name)).toEqual(["web"]);

    // A restarted agent has no stored set: it waits for the edge's, as with none ever stored.
    await agent();
    expect(logs.some((l) => l.startsWith("stored security profiles"))).toBe(false);
    expect(await stored()).toBeUndefined();
  });
});
