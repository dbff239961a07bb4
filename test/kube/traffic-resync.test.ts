// The agent's resync of a governed pod's egress objects (traffic-objects.ts `resync`) against the
// real API server: what nobody touched is only read, never written again, however many rounds
// pass; what someone edited is put back. Writes are counted as the API server sees them (every
// request of the agent's KubeConfig, by method and path) and as the agent's log says them.
import { readFileSync } from "node:fs";
import type { KubeConfig, V1NetworkPolicy } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KubernetesDriver, type KubeDesiredSandbox } from "../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { TestKubelet } from "./support/kubelet.ts";
import { freshNamespace, kubeConfig, kubectlOk, until } from "./support/namespace.ts";

let ns: string;
let driver: KubernetesDriver;
let kubelet: TestKubelet;
let kc: KubeConfig;
/** Every request the agent sent: `METHOD path`. */
const requests: string[] = [];
const logs: string[] = [];
/** When set, each request of the agent waits for what it returns before it is sent. */
let hold: ((request: string) => Promise<void> | undefined) | undefined;

function desired(id: string, over: Partial<KubeDesiredSandbox> = {}): KubeDesiredSandbox {
  return { id, generation: 1, template: "plain", pool: "plain", namespace: ns, state: "Running", pauseStrategy: "Stop", resources: { cpuCount: 1, memoryMB: 512 }, allowInternetAccess: false, claimed: true, ...over };
}

const kget = <T>(kind: string, name: string): T => JSON.parse(kubectlOk(["-n", ns, "get", kind, name, "-o", "json"])) as T;
/** The agent's requests for one object since `from`, by verb. */
function sent(from: number, path: string): { reads: number; writes: number } {
  const mine = requests.slice(from).filter((r) => r.endsWith(path));
  return { reads: mine.filter((r) => r.startsWith("GET ")).length, writes: mine.filter((r) => !r.startsWith("GET ")).length };
}

beforeAll(async () => {
  ns = await freshNamespace("resync");
  kubectlOk(["-n", ns, "apply", "-f", "-"], readFileSync("k8s/injection-config.yaml", "utf8").replace("namespace: sandbox-system", `namespace: ${ns}`));
  kubectlOk(["-n", ns, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxSet\nmetadata: { name: plain }\nspec:\n  replicas: 0\n  template: { spec: { containers: [{ name: sandbox, image: python:3.12 }] } }\n");
  kubelet = new TestKubelet(kubeConfig(), ns);
  await kubelet.start();
  kc = kubeConfig("agent");
  const apply = kc.applySecurityAuthentication.bind(kc);
  kc.applySecurityAuthentication = async (ctx) => {
    const request = `${ctx.getHttpMethod()} ${new URL(ctx.getUrl()).pathname}`;
    requests.push(request);
    await hold?.(request);
    return apply(ctx);
  };
  driver = new KubernetesDriver({ kubeConfig: kc, namespace: ns, runtimeImage: "ghcr.io/kruise-edge/sandbox-agent:test", trafficResyncMs: 200, log: (line) => logs.push(line) });
  await driver.start();
  await driver.setSecurityProfiles([]);
  await driver.setTrafficPolicies([]);
  await until("set and injection config", () => driver.sandboxSets.get("plain") && driver.injection.current()["traffic-proxy"]);
});

afterAll(async () => {
  await driver?.stop();
  await kubelet?.stop();
});

describe("resync of a governed pod's egress objects", () => {
  it("an untouched NetworkPolicy and ConfigMap are read each round and never written; an edited NetworkPolicy is written back once", async () => {
    await driver.ensure(desired("still1"));
    const np = `/apis/networking.k8s.io/v1/namespaces/${ns}/networkpolicies/plain-still1-egress`;
    const cm = `/api/v1/namespaces/${ns}/configmaps/plain-still1-traffic`;
    const want = kget<V1NetworkPolicy>("networkpolicy", "plain-still1-egress");

    // Rounds pass with nobody touching anything: each reads both objects, none writes.
    const from = requests.length;
    await until("five resync rounds", () => sent(from, np).reads >= 5 && sent(from, cm).reads >= 5);
    expect(sent(from, np).writes).toBe(0);
    expect(sent(from, cm).writes).toBe(0);
    expect(logs.filter((l) => l.includes("put back"))).toEqual([]);
    expect(kget<V1NetworkPolicy>("networkpolicy", "plain-still1-egress").metadata!.resourceVersion).toBe(want.metadata!.resourceVersion);

    // A namespace admin opens the backstop: put back, with one write, then quiet again.
    const edited = requests.length;
    kubectlOk(["-n", ns, "patch", "networkpolicy", "plain-still1-egress", "--type", "json", "-p", JSON.stringify([{ op: "replace", path: "/spec/egress", value: [{}] }])]);
    await until("the NetworkPolicy put back", () => JSON.stringify(kget<V1NetworkPolicy>("networkpolicy", "plain-still1-egress").spec) === JSON.stringify(want.spec));
    const after = requests.length;
    await until("five more rounds", () => sent(after, np).reads >= 5);
    expect(sent(edited, np).writes).toBe(1);
    expect(logs.filter((l) => l.includes("put back"))).toEqual([`np/${ns}/plain-still1-egress: changed outside the agent; put back`]);
  });

  it("a restarted agent finds its objects as it would write them and writes none of them again", async () => {
    await driver.stop();
    const from = requests.length;
    const restarted = new KubernetesDriver({ kubeConfig: kc, namespace: ns, runtimeImage: "ghcr.io/kruise-edge/sandbox-agent:test", trafficResyncMs: 200, log: (line) => logs.push(line) });
    driver = restarted;
    await driver.start();
    await driver.setSecurityProfiles([]);
    await driver.setTrafficPolicies([]);
    await until("set and injection config", () => driver.sandboxSets.get("plain") && driver.injection.current()["traffic-proxy"]);
    await driver.ensure(desired("still1"));
    const np = `/apis/networking.k8s.io/v1/namespaces/${ns}/networkpolicies/plain-still1-egress`;
    await until("three resync rounds", () => sent(from, np).reads >= 3);
    // The first ensure's create finds the object (409) and compares: nothing to replace.
    expect(requests.slice(from).filter((r) => r.endsWith(np) && r.startsWith("PUT "))).toEqual([]);
  });

  it("a sandbox destroyed while resync rounds run stays gone: its objects are not put back", async () => {
    await driver.ensure(desired("gone1"));
    const cm = `/api/v1/namespaces/${ns}/configmaps/plain-gone1-traffic`;
    const secret = `/api/v1/namespaces/${ns}/secrets/plain-gone1-traffic`;
    await until("a resync round reads its ConfigMap", () => sent(0, cm).reads >= 1);
    // Destroy deletes the ConfigMap, then the Secret: the Secret's delete is held while resync
    // rounds (every 200 ms) run, so a round reads the ConfigMap already gone.
    let deletedCm = -1;
    hold = async (request) => {
      if (request === `DELETE ${cm}`) deletedCm = requests.length;
      if (request !== `DELETE ${secret}`) return;
      await new Promise((r) => setTimeout(r, 1000));
    };
    try {
      await driver.destroy("gone1");
    } finally {
      hold = undefined;
    }
    expect(deletedCm).toBeGreaterThan(0);
    // Rounds after the destroy see nothing of it to put back.
    const after = requests.length;
    const still = `/apis/networking.k8s.io/v1/namespaces/${ns}/networkpolicies/plain-still1-egress`;
    await until("three more rounds", () => sent(after, still).reads >= 3);
    expect(kubectlOk(["-n", ns, "get", "configmap,secret,networkpolicy", "-o", "name"])).not.toContain("gone1");
    expect(logs.filter((l) => l.includes("gone1") && l.includes("put back"))).toEqual([]);
  });
});
