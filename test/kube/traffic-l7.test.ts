// L7 SecurityProfiles in a sandbox pod, against the real API server: the agent's driver writes
// the profiles selecting a sandbox into its pod's policy file, and the pod gets the traffic-proxy
// for them. No kubelet runs containers here, so the pod as the API server holds it (its spec, its
// ConfigMap) is then run by test/kube/support/pod-netns.ts: the volumes laid out as the spec says,
// the init containers and the sidecar run as processes in a network namespace this test creates,
// and a "sandbox" process (uid 1000, no proxy variables, the sandbox container's env) talks to a
// stand-in internet through it. This is the sidecar's process, not a pod in a cluster.
// Needs root for the namespaces: run under the shared lock.
import { CoreV1Api, type V1Pod } from "@kubernetes/client-node";
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KubernetesDriver, type KubeDesiredSandbox } from "../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { SecurityProfileSpec, type SecurityProfileEntry } from "../../schema/api/security-profile.ts";
import { LABEL } from "../../schema/crd/labels.ts";
import { TestKubelet } from "./support/kubelet.ts";
import { freshNamespace, kubeConfig, kubectlOk, until } from "./support/namespace.ts";
import { PodNetns, type PodObjects } from "./support/pod-netns.ts";

let ns: string;
let driver: KubernetesDriver;
let kubelet: TestKubelet;
let core: CoreV1Api;
const net = new PodNetns();

const kget = <T>(kind: string, name: string): T => JSON.parse(kubectlOk(["-n", ns, "get", kind, name, "-o", "json"])) as T;

function desired(id: string, over: Partial<KubeDesiredSandbox> = {}): KubeDesiredSandbox {
  return { id, generation: 1, template: "plain", pool: "plain", namespace: ns, state: "Running", pauseStrategy: "Stop", resources: { cpuCount: 1, memoryMB: 512 }, allowInternetAccess: true, claimed: true, ...over };
}

const profile = (name: string, spec: unknown): SecurityProfileEntry => ({ team: ns, name, spec: SecurityProfileSpec.parse(spec), createdAt: 1 });

/** What the pod's volumes name, read back from the API server as the kubelet would. */
function objectsOf(pod: V1Pod): PodObjects {
  const out: PodObjects = { configMaps: {}, secrets: {} };
  for (const v of pod.spec!.volumes ?? []) {
    if (v.configMap) out.configMaps[v.configMap.name!] = kget<{ data: Record<string, string> }>("configmap", v.configMap.name!).data;
    if (v.secret) out.secrets[v.secret.secretName!] = kget<{ data: Record<string, string> }>("secret", v.secret.secretName!).data;
  }
  return out;
}

beforeAll(async () => {
  ns = await freshNamespace("l7");
  core = kubeConfig().makeApiClient(CoreV1Api);
  kubectlOk(["-n", ns, "apply", "-f", "-"], readFileSync("k8s/injection-config.yaml", "utf8").replace("namespace: sandbox-system", `namespace: ${ns}`));
  kubectlOk(["-n", ns, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxSet\nmetadata: { name: plain }\nspec:\n  replicas: 0\n  template: { spec: { containers: [{ name: sandbox, image: python:3.12 }] } }\n");
  kubelet = new TestKubelet(kubeConfig(), ns);
  await kubelet.start();
  driver = new KubernetesDriver({ kubeConfig: kubeConfig("agent"), namespace: ns, runtimeImage: "ghcr.io/kruise-edge/sandbox-agent:test" });
  await driver.start();
  await until("sets and injection config", () => driver.sandboxSets.get("plain") && driver.injection.current()["traffic-proxy"]);
  await driver.setTrafficPolicies([]);
}, 120_000);

afterAll(async () => {
  await net.stop();
  await driver?.stop();
  await kubelet?.stop();
});

describe("SecurityProfiles in a sandbox pod", () => {
  it("a profile selecting a sandbox gives its pod the sidecar, the profile in its file, and the sidecar enforces it on the transparent path", async () => {
    await driver.setSecurityProfiles([
      profile("api-guard", {
        priority: 10,
        selector: { matchLabels: { app: "l7" } },
        rules: [
          { name: "no-admin", match: [{ domains: ["api.test"], paths: [{ type: "Prefix", value: "/admin" }] }], actions: { block: { statusCode: 451 } } },
          { name: "tag", match: [{ domains: ["api.test"] }], actions: { headerManipulation: { set: [{ name: "x-profile", value: "api-guard" }] } } },
        ],
      }),
      profile("elsewhere", { selector: { matchLabels: { app: "other" } }, rules: [{ name: "all", match: [{ domains: ["*"] }], actions: { block: {} } }] }),
    ]);
    await driver.ensure(desired("l7a", { labels: { app: "l7" } }));
    const pods = (await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=l7a` })).items;
    expect(pods).toHaveLength(1);
    const pod = pods[0]!;
    // No E2B rules and no TrafficPolicy: the profile alone governs it.
    expect(pod.metadata!.labels![LABEL.trafficProxy]).toBe("governed");
    const file = JSON.parse(kget<{ data: Record<string, string> }>("configmap", "plain-l7a-traffic").data["policy.json"]!) as { securityProfiles?: { name: string }[] };
    expect(file.securityProfiles?.map((p) => p.name)).toEqual(["api-guard"]);

    await net.start(pod, objectsOf(pod));
    const get = (url: string) => net.sandboxRun("sandbox", ["curl", "-sS", "--max-time", "8", "-w", " %{http_code}", url]);
    expect(get("http://api.test/ok")).toEqual({ code: 0, out: "saw GET /ok ['x-profile=api-guard'] 200" });
    expect(get("http://api.test/admin/users").out).toMatch(/ 451$/);
    // A host no rule names passes untouched.
    expect(get("http://other.test/admin")).toEqual({ code: 0, out: "saw GET /admin [] 200" });
  });
});
