// A governed pod's L7 audit records reach the agent (issue 14), against the real API server: the
// driver writes the pod's pull token into its Secret, and its collector (pod-audit.ts) pulls the
// sidecar's records from the pod's address as its status gives it and hands them to the driver's
// `setNetworkAudit` sink (the agent keeps them as the sandbox's network audit, as the local
// driver's) under the sandbox it pulled from. No kubelet runs containers here: the pod as the API
// server holds it is run by support/pod-netns.ts (the redirect, the real sidecar process, a
// "sandbox" process making requests), with a second link from this machine into the pod's
// namespace standing in for the cluster network, whose address the test kubelet reports as the
// pod's IP. Needs root for the namespaces: run under the shared lock.
import { readFileSync } from "node:fs";
import { CoreV1Api, type V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KubernetesDriver, type KubeDesiredSandbox } from "../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { SecurityProfileSpec, type SecurityProfileEntry } from "../../schema/api/security-profile.ts";
import type { NetworkAuditRecord } from "../../schema/api/network-audit.ts";
import { LABEL } from "../../schema/crd/labels.ts";
import { TestKubelet } from "./support/kubelet.ts";
import { freshNamespace, kubeConfig, kubectlOk, until } from "./support/namespace.ts";
import { PodNetns, podObjects } from "./support/pod-netns.ts";

let ns: string;
let driver: KubernetesDriver;
let kubelet: TestKubelet;
let core: CoreV1Api;
const net = new PodNetns();
const kept: NetworkAuditRecord[] = [];

const kget = <T>(kind: string, name: string): T => JSON.parse(kubectlOk(["-n", ns, "get", kind, name, "-o", "json"])) as T;

function desired(id: string, over: Partial<KubeDesiredSandbox> = {}): KubeDesiredSandbox {
  return { id, generation: 1, template: "plain", pool: "plain", namespace: ns, state: "Running", pauseStrategy: "Stop", resources: { cpuCount: 1, memoryMB: 512 }, allowInternetAccess: true, claimed: true, ...over };
}

const guard = (): SecurityProfileEntry => ({
  team: null,
  name: "api-guard",
  createdAt: 1,
  spec: SecurityProfileSpec.parse({
    // A global profile sees only the platform's labels (review 25 M4): the template's, and the
    // team's, since any team may name a template "plain" (review 26 H2).
    selector: { matchLabels: { "agents.kruise.io/sandbox-template": "plain", "agents.kruise.io/sandbox-team": ns } },
    rules: [
      { name: "no-admin", match: [{ domains: ["api.test"], paths: [{ type: "Prefix", value: "/admin" }] }], actions: { block: { statusCode: 451 } } },
      { name: "tag", match: [{ domains: ["api.test"] }], actions: { headerManipulation: { set: [{ name: "x-profile", value: "guard" }] } } },
    ],
  }),
});

async function startDriver(): Promise<KubernetesDriver> {
  const d = new KubernetesDriver({ kubeConfig: kubeConfig("agent"), namespace: ns, runtimeImage: "ghcr.io/kruise-edge/sandbox-agent:test" });
  d.setNetworkAudit((r) => kept.push(r));
  await d.start();
  await until("set and injection config", () => d.sandboxSets.get("plain") && d.injection.current()["traffic-proxy"]);
  await d.setTrafficPolicies([]);
  await d.setSecurityProfiles([guard()]);
  return d;
}

const get = (url: string) => net.sandboxRun("sandbox", ["curl", "-sS", "--max-time", "8", "-w", " %{http_code}", url]);
const of = (id: string) => kept.filter((r) => r.sandbox === id);

beforeAll(async () => {
  ns = await freshNamespace("audit");
  core = kubeConfig().makeApiClient(CoreV1Api);
  kubectlOk(["-n", ns, "apply", "-f", "-"], readFileSync("k8s/injection-config.yaml", "utf8").replace("namespace: sandbox-system", `namespace: ${ns}`));
  kubectlOk(["-n", ns, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxSet\nmetadata: { name: plain }\nspec:\n  replicas: 0\n  template: { spec: { containers: [{ name: sandbox, image: python:3.12 }] } }\n");
  // The audited pod's address is the one this machine reaches it at; the others' go nowhere.
  kubelet = new TestKubelet(kubeConfig(), ns, { ipFor: (pod) => (pod.metadata?.name === "plain-aud1" ? net.clusterIp : undefined) });
  await kubelet.start();
  driver = await startDriver();
}, 120_000);

afterAll(async () => {
  await net.stop();
  await driver?.stop();
  await kubelet?.stop();
});

describe("a governed pod's audit records", () => {
  it("reach the agent from the sidecar, each once, as the sandbox's whose pod was pulled", async () => {
    await driver.ensure(desired("aud1", { labels: { app: "audited" } }));
    // Another sandbox the profile selects, whose pod is never reached: nothing is kept for it.
    await driver.ensure(desired("aud2", { labels: { app: "audited" } }));
    const pod = (await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=aud1` })).items[0]!;
    expect(pod.status?.podIP).toBe(net.clusterIp);
    // The pull token is in the pod's Secret (mounted into the sidecar only).
    expect(Buffer.from(kget<{ data: Record<string, string> }>("secret", "plain-aud1-traffic").data["audit.token"]!, "base64").toString()).toMatch(/^[A-Za-z0-9_-]{43}$/);
    await net.start(pod, podObjects(pod));
    net.linkHost();

    expect(get("http://api.test/ok?q=secret-query")).toEqual({ code: 0, out: "saw GET /ok?q=secret-query ['x-profile=guard'] 200" });
    expect(get("http://api.test/admin/users").out).toMatch(/ 451$/);
    await until("both records kept", () => of("aud1").length >= 2, 30_000);
    expect(of("aud1")).toEqual([
      { sandbox: "aud1", host: "api.test", method: "GET", path: "/ok", rule: "tag", status: 200, bytesOut: 0, bytesIn: expect.any(Number), refused: false },
      { sandbox: "aud1", host: "api.test", method: "GET", path: "/admin/users", rule: "no-admin", status: 451, bytesOut: 0, bytesIn: 0, refused: true },
    ]);
    // Each once: a later request's record comes alone.
    get("http://api.test/third");
    await until("the third record", () => of("aud1").length >= 3, 30_000);
    expect(of("aud1").map((r) => r.path)).toEqual(["/ok", "/admin/users", "/third"]);
    expect(kept.every((r) => r.sandbox === "aud1")).toBe(true);
    // The sidecar's stdout still has them (kubectl logs).
    expect(net.sidecarOut).toMatch(/audit \{[^\n]*"path":"\/admin\/users"/);

    // The sandbox's own code, on the pod's address, gets nothing without the token, and takes
    // nothing from the agent.
    get("http://api.test/fourth");
    expect(get(`http://${net.clusterIp}:15021/audit`).out).toMatch(/ 403$/);
    await until("the fourth record", () => of("aud1").some((r) => r.path === "/fourth"), 30_000);
  });

  it("a restarted agent writes the pod a new token, and the records kept meanwhile reach it", async () => {
    await driver.stop();
    const before = kget<{ data: Record<string, string> }>("secret", "plain-aud1-traffic").data["audit.token"];
    expect(get("http://api.test/while-down").out).toMatch(/ 200$/);
    driver = await startDriver();
    await driver.ensure(desired("aud1", { labels: { app: "audited" } }));
    // Written behind the ensure of a running pod (with its status).
    const after = await until("a new token in the Secret", () => {
      const t = kget<{ data: Record<string, string> }>("secret", "plain-aud1-traffic").data["audit.token"]!;
      return t !== before && t;
    });
    // Until the kubelet projects the new file the sidecar refuses the new agent; the records wait.
    net.reproject("plain-aud1-traffic", "audit.token", after);
    await until("the record made while the agent was down", () => of("aud1").some((r) => r.path === "/while-down"), 30_000);
    expect(of("aud1").filter((r) => r.path === "/while-down")).toHaveLength(1);
  });
});
