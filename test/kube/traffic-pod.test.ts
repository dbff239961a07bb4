// Egress on Kubernetes against the real API server (no kubelet runs the containers: the redirect
// itself is proven in test/controllers/drivers/kubernetes/traffic-redirect.test.ts): a governed
// sandbox's pod as kubectl shows it (the traffic-redirect init container with its nft ruleset as
// an argument, the traffic-proxy sidecar, their securityContexts, the sandbox container without
// NET_ADMIN/NET_RAW), its policy ConfigMap (tenant bytes as JSON data only) and its NetworkPolicy
// backstop; a TrafficPolicy that starts selecting a running sandbox replaces its pod with one that
// has the proxy and changes the ConfigMap of one that has it; a template that would escape the
// redirect (host namespaces, hostPath, privileged, capabilities, sysctls, procMount, our names) is
// refused with a kubectl-visible condition and Events (a pool of it: a ReplicaFailure condition on
// its SandboxSet); a cluster without a traffic-proxy image refuses a governed sandbox rather than running it open; after an agent restart the policy
// set it was last sent still governs new pods; a governed pod an older agent built from such a
// template (fields dropped), or made before the image left the config, stays Ready and only its
// next pod is refused. The agent's own RBAC throughout.
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { CoreV1Api, type V1Container, type V1NetworkPolicy, type V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KubernetesDriver, type KubeDesiredSandbox } from "../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { DEFAULT_CLUSTER_CIDRS, PROXY_UID, redirectRules, REDIRECT_SCRIPT, TRANSPARENT_PORT } from "../../controllers/drivers/kubernetes/traffic-pod.ts";
import { POLICY_SET_CONFIGMAP } from "../../controllers/drivers/kubernetes/policy-store.ts";
import { POLICY_ANNOTATION } from "../../controllers/drivers/kubernetes/traffic-objects.ts";
import { TrafficPolicySpec, type TrafficPolicyEntry } from "../../schema/api/traffic-policy.ts";
import { LABEL } from "../../schema/crd/labels.ts";
import { TestKubelet } from "./support/kubelet.ts";
import { freshNamespace, kubeConfig, kubectl, kubectlOk, until } from "./support/namespace.ts";

const HOSTILE = "x'$(touch /tmp/pwned)`id`";
let ns: string;
let driver: KubernetesDriver;
let kubelet: TestKubelet;
let core: CoreV1Api;
const last = new Map<string, KubeDesiredSandbox>();

function desired(id: string, over: Partial<KubeDesiredSandbox> = {}): KubeDesiredSandbox {
  return { id, generation: 1, template: "plain", pool: "plain", namespace: ns, state: "Running", pauseStrategy: "Stop", resources: { cpuCount: 1, memoryMB: 512 }, allowInternetAccess: true, claimed: true, ...over };
}

async function ensure(d: KubeDesiredSandbox) {
  last.set(d.id, d);
  return driver.ensure(d);
}

async function podOf(id: string): Promise<V1Pod> {
  const pods = (await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=${id}` })).items.filter((p) => !p.metadata?.deletionTimestamp);
  expect(pods).toHaveLength(1);
  return pods[0]!;
}

const kget = <T>(kind: string, name: string): T => JSON.parse(kubectlOk(["-n", ns, "get", kind, name, "-o", "json"])) as T;
const policyFile = (pod: string) => JSON.parse(kget<{ data: Record<string, string> }>("configmap", `${pod}-traffic`).data["policy.json"]!) as { egress: unknown; labels: Record<string, string>; trafficPolicies: { name: string }[] };
const byName = (cs: V1Container[] | undefined, name: string) => (cs ?? []).find((c) => c.name === name)!;
/** The pod has the traffic-proxy: a native sidecar (an init container) here, a container on older clusters. */
const hasProxy = (pod: V1Pod) => [...pod.spec!.containers, ...(pod.spec!.initContainers ?? [])].some((c) => c.name === "traffic-proxy");

function entry(team: string | null, name: string, spec: unknown): TrafficPolicyEntry {
  return { team, name, spec: TrafficPolicySpec.parse(spec) };
}

beforeAll(async () => {
  ns = await freshNamespace("egress");
  core = kubeConfig().makeApiClient(CoreV1Api);
  kubectlOk(["-n", ns, "apply", "-f", "-"], readFileSync("k8s/injection-config.yaml", "utf8").replace("namespace: sandbox-system", `namespace: ${ns}`));
  // The in-place images the claims below ask for (review 25 M3).
  kubectlOk(["-n", ns, "create", "configmap", "sandbox-injection-config-user", `--from-literal=pod-policy=${JSON.stringify({ inplaceImages: ["python"] })}`]);
  kubectlOk(["-n", ns, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxSet\nmetadata: { name: plain }\nspec:\n  replicas: 0\n  template: { spec: { containers: [{ name: sandbox, image: python:3.12, securityContext: { capabilities: { add: [CHOWN] } } }] } }\n");
  // A template that asks for what escapes the redirect (host namespaces, hostPath, every
  // capability, an unsafe sysctl, an unmasked /proc, a container named as the platform's pair):
  // a governed sandbox of it is refused, field by field.
  kubectlOk(["-n", ns, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxSet\nmetadata: { name: hostile }\nspec:\n  replicas: 0\n  template: { spec: { hostNetwork: true, hostPID: true, securityContext: { sysctls: [{ name: net.ipv4.conf.all.route_localnet, value: '1' }] }, volumes: [{ name: node, hostPath: { path: /run } }], initContainers: [{ name: setup, image: evil:1, securityContext: { privileged: true } }], containers: [{ name: sandbox, image: python:3.12, securityContext: { procMount: Unmasked, capabilities: { add: [ALL, NET_RAW] } } }, { name: traffic-redirect, image: evil:1 }] } }\n");
  // Only the node's network: refused, governed or not.
  kubectlOk(["-n", ns, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxSet\nmetadata: { name: hostnet }\nspec:\n  replicas: 0\n  template: { spec: { hostNetwork: true, containers: [{ name: sandbox, image: python:3.12 }] } }\n");
  // Only a reserved name: an init container named as the CA one (it would see the pod's CA).
  kubectlOk(["-n", ns, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxSet\nmetadata: { name: reserved }\nspec:\n  replicas: 0\n  template: { spec: { initContainers: [{ name: traffic-ca, image: evil:1 }], containers: [{ name: sandbox, image: python:3.12 }] } }\n");
  kubectlOk(["-n", ns, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxSet\nmetadata: { name: listed }\nspec:\n  replicas: 0\n  runtimes: [{ name: traffic-proxy }]\n  template: { spec: { containers: [{ name: sandbox, image: python:3.12 }] } }\n");
  kubelet = new TestKubelet(kubeConfig(), ns);
  await kubelet.start();
  await startAgent();
});

/** The agent's driver, as a (re)started agent makes it. */
async function startAgent(): Promise<void> {
  // The reconciler's part: a requeued sandbox is ensured again with its last desired state.
  driver = new KubernetesDriver({ kubeConfig: kubeConfig("agent"), namespace: ns, runtimeImage: "ghcr.io/kruise-edge/sandbox-agent:test", trafficResyncMs: 300, onChange: (id) => void (last.has(id) && driver.ensure(last.get(id)!).catch(() => {})) });
  await driver.start();
  // The edge sends its SecurityProfile set with each welcome (none here).
  await driver.setSecurityProfiles([]);
  await until("sets and injection config", () => driver.sandboxSets.get("plain") && driver.sandboxSets.get("listed") && driver.sandboxSets.get("hostile") && driver.sandboxSets.get("reserved") && driver.sandboxSets.get("hostnet") && driver.injection.current()["traffic-proxy"] && driver.injection.current()["pod-policy"]?.inplaceImages.includes("python"));
}

afterAll(async () => {
  await driver?.stop();
  await kubelet?.stop();
});

describe("egress on kubernetes", () => {
  it("a sandbox with allowOut: the redirect, the sidecar, the ConfigMap and the NetworkPolicy, as kubectl shows them", async () => {
    await ensure(desired("rules1", { allowInternetAccess: false, egress: { allowOut: ["pypi.org", "10.1.2.3/24"], denyOut: [] }, labels: { app: HOSTILE } }));
    const pod = kget<V1Pod>("pod", "plain-rules1");

    expect(pod.metadata!.labels![LABEL.trafficProxy]).toBe("governed");
    const init = byName(pod.spec!.initContainers, "traffic-redirect");
    expect(init.command).toEqual(["/bin/sh", "-ec", REDIRECT_SCRIPT, "traffic-redirect", redirectRules()]);
    // Exempt is the proxy's own container (its launcher fills `proxy` with its cgroup), not a uid.
    expect(init.command![4]).toContain("chain proxy {\n  }");
    expect(init.command![4]).toContain("jump proxy");
    expect(init.command![4]).not.toContain("skuid");
    expect(init.command![4]).toContain(`tproxy to 127.0.0.1:${TRANSPARENT_PORT}`);
    expect(init.command![2]).toContain(`printf '%s' "$1" | nft -f -`); // the ruleset is an argument, not shell text
    expect(init.securityContext).toMatchObject({ runAsUser: 0, allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"], add: ["NET_ADMIN"] } });

    // The API server here is 1.35: the proxy is a native sidecar (an init container the kubelet
    // keeps running), third, so the template's own init containers start once it answers.
    expect(byName(pod.spec!.containers, "traffic-proxy")).toBeUndefined();
    const proxy = byName(pod.spec!.initContainers, "traffic-proxy");
    expect(proxy.restartPolicy).toBe("Always");
    expect(proxy.startupProbe).toMatchObject({ httpGet: { path: "/ready", port: 15021 } });
    expect(proxy.image).toBe("ghcr.io/kruise-edge/sandbox-agent:0.1.0");
    expect(proxy.command!.slice(0, 6)).toEqual(["perl", "/app/controllers/traffic/transparent.pl", "127.0.0.1", String(TRANSPARENT_PORT), String(PROXY_UID), "--"]);
    expect(proxy.command).toContain("--pod-policy");
    expect(proxy.command!.join(" ")).toContain(`main.ts --uid ${PROXY_UID} `);
    expect(proxy.securityContext).toMatchObject({ runAsUser: 0, allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ["ALL"], add: ["NET_ADMIN", "SETUID", "SETGID"] } });
    expect(proxy.readinessProbe).toMatchObject({ httpGet: { path: "/ready", port: 15021 } });
    expect(proxy.livenessProbe).toMatchObject({ httpGet: { path: "/ready", port: 15021 } });
    expect(proxy.volumeMounts).toEqual([
      { name: "sandbox-traffic", mountPath: "/etc/sandbox-traffic", readOnly: true },
      { name: "sandbox-traffic-secret", mountPath: "/etc/sandbox-traffic-secret", readOnly: true },
    ]);
    expect(pod.spec!.volumes).toContainEqual({ name: "sandbox-traffic", configMap: { name: "plain-rules1-traffic", defaultMode: 420 } });

    // The redirect runs before any other init container, then the CA and the proxy; the sandbox
    // container (CHOWN, as its template asks) and the agent-runtime drop what would undo the rules
    // or reach into the proxy.
    expect(pod.spec!.initContainers!.map((c) => c.name)).toEqual(["traffic-redirect", "traffic-ca", "traffic-proxy"]);
    const dropped = ["NET_ADMIN", "NET_RAW", "SYS_ADMIN", "SYS_PTRACE", "BPF"];
    const sandbox = byName(pod.spec!.containers, "sandbox");
    expect(sandbox.securityContext!.capabilities!.drop).toEqual(dropped);
    expect(sandbox.securityContext!.capabilities!.add).toEqual(["CHOWN"]);
    expect(byName(pod.spec!.containers, "agent-runtime").securityContext!.capabilities!.drop).toEqual(dropped);

    // Tenant bytes travel as JSON in the ConfigMap, and nowhere in what a container runs.
    expect(policyFile("plain-rules1")).toEqual({ team: ns, labels: { app: HOSTILE, "agents.kruise.io/sandbox-template": "plain", "agents.kruise.io/sandbox-team": ns }, egress: { allowOut: ["pypi.org", "10.1.2.3/24"], denyOut: ["0.0.0.0/0"] }, trafficPolicies: [] });
    for (const c of [...pod.spec!.containers, ...pod.spec!.initContainers!]) expect(JSON.stringify([c.command, c.args, c.env])).not.toMatch(/pwned|pypi|10\.1\.2/);

    const np = kget<V1NetworkPolicy>("networkpolicy", "plain-rules1-egress");
    expect(np.metadata!.ownerReferences![0]).toMatchObject({ kind: "Sandbox", name: "plain-rules1" });
    // The tenant's own allowOut of 10.1.2.0/24 does not open the backstop (its proxy allows it; only
    // a GlobalTrafficPolicy opens the cluster's ranges), and DNS goes to the cluster DNS's pods only.
    expect(np.spec).toEqual({
      podSelector: { matchLabels: { [LABEL.sandboxId]: "rules1" } },
      policyTypes: ["Egress"],
      egress: [
        { to: [{ namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "kube-system" } }, podSelector: { matchLabels: { "k8s-app": "kube-dns" } } }], ports: [{ protocol: "UDP", port: 53 }, { protocol: "TCP", port: 53 }] },
        { to: [{ ipBlock: { cidr: "0.0.0.0/0", except: DEFAULT_CLUSTER_CIDRS } }] },
      ],
    });
  });

  it("a tenant's kubectl edit of policy.json, or delete of the NetworkPolicy, is put back by the agent", async () => {
    await ensure(desired("drift1", { allowInternetAccess: false }));
    const want = kget<{ data: Record<string, string> }>("configmap", "plain-drift1-traffic").data["policy.json"];
    const wantNp = kget<V1NetworkPolicy>("networkpolicy", "plain-drift1-egress").spec;
    kubectlOk(["-n", ns, "patch", "configmap", "plain-drift1-traffic", "--type", "merge", "-p", JSON.stringify({ data: { "policy.json": JSON.stringify({ team: ns, labels: {}, egress: null, trafficPolicies: [] }) } })]);
    kubectlOk(["-n", ns, "delete", "networkpolicy", "plain-drift1-egress"]);
    await until("policy.json put back", () => kget<{ data: Record<string, string> }>("configmap", "plain-drift1-traffic").data["policy.json"] === want);
    await until("NetworkPolicy put back", () => kubectlOk(["-n", ns, "get", "networkpolicy", "-o", "name"]).includes("plain-drift1-egress"));
    expect(kget<V1NetworkPolicy>("networkpolicy", "plain-drift1-egress").spec).toEqual(wantNp);
  });

  it("the pod's Secret (policy, CA, secret values), edited or deleted with kubectl, comes back as it was", async () => {
    const secret = () => kget<{ data: Record<string, string> }>("secret", "plain-drift1-traffic").data;
    const want = secret();
    expect(Object.keys(want).sort()).toEqual(["audit.token", "ca.crt", "ca.key", "l7.json", "secrets.json"]);
    const b64 = (t: string) => Buffer.from(t).toString("base64");
    kubectlOk(["-n", ns, "patch", "secret", "plain-drift1-traffic", "--type", "merge", "-p", JSON.stringify({ data: { "l7.json": b64("{}"), "ca.key": b64("mine"), "extra": b64("x") } })]);
    await until("the Secret put back", () => JSON.stringify(secret()) === JSON.stringify(want));
    kubectlOk(["-n", ns, "delete", "secret", "plain-drift1-traffic"]);
    await until("the Secret made again", () => kubectl(["-n", ns, "get", "secret", "plain-drift1-traffic"]).status === 0);
    expect(secret()).toEqual(want);
  });

  it("a template that would escape the redirect is refused with an UnsafePodSpec condition and Events, never run with fields dropped; a running ungoverned pod is deleted", async () => {
    const sandboxOf = (name: string) => kget<{ status?: { conditions?: { type: string; status: string; reason: string; message: string }[] } }>("sandbox", name);
    const events = (kind: string, name: string) => kubectlOk(["-n", ns, "get", "events", "--field-selector", `involvedObject.kind=${kind},involvedObject.name=${name},reason=UnsafePodSpec`, "-o", "jsonpath={.items[*].message}"]);
    await expect(ensure(desired("hostile1", { template: "hostile", pool: "hostile", allowInternetAccess: false }))).rejects.toMatchObject({ reason: "UnsafePodSpec" });
    expect((await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=hostile1` })).items).toHaveLength(0);
    const ready = sandboxOf("hostile-hostile1").status!.conditions!.find((c) => c.type === "Ready")!;
    expect(ready).toMatchObject({ status: "False", reason: "UnsafePodSpec" });
    for (const field of ["hostNetwork", "hostPID", '"net.ipv4.conf.all.route_localnet"', 'hostPath "/run"', 'initContainers "setup": privileged', "capabilities.add ALL, NET_RAW", "procMount Unmasked", 'containers "traffic-redirect": the name is the traffic-proxy\'s']) expect(ready.message).toContain(field);
    expect(events("Sandbox", "hostile-hostile1")).toContain("hostNetwork");
    expect(events("SandboxSet", "hostile")).toContain("hostNetwork");
    // A new governed member of the same set: refused before any pod exists; the set's Event once.
    await expect(ensure(desired("hostile2", { template: "hostile", pool: "hostile", allowInternetAccess: false }))).rejects.toMatchObject({ reason: "UnsafePodSpec" });
    expect((await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=hostile2` })).items).toHaveLength(0);
    expect(kubectlOk(["-n", ns, "get", "events", "--field-selector", "involvedObject.kind=SandboxSet,involvedObject.name=hostile,reason=UnsafePodSpec", "-o", "name"]).trim().split("\n")).toHaveLength(1);

    // Nothing governs it: a hostNetwork template is refused all the same (every pod is judged:
    // pod-judge.test.ts).
    await expect(ensure(desired("hostnet0", { template: "hostnet", pool: "hostnet" }))).rejects.toMatchObject({ reason: "UnsafePodSpec" });
    expect((await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=hostnet0` })).items).toHaveLength(0);
    // A running ungoverned pod whose Sandbox's template was edited to hostNetwork since, governed
    // now: refused, and the pod (no proxy) goes rather than stay ungoverned.
    await ensure(desired("hostnet1"));
    await podOf("hostnet1");
    kubectlOk(["-n", ns, "patch", "sandbox", "plain-hostnet1", "--type", "merge", "-p", JSON.stringify({ spec: { template: { spec: { hostNetwork: true, containers: [{ name: "sandbox", image: "python:3.12" }] } } } })]);
    await until("the edit seen", () => driver.sandboxes.get("plain-hostnet1")?.spec.template?.spec?.hostNetwork === true);
    await expect(ensure(desired("hostnet1", { generation: 2, allowInternetAccess: false }))).rejects.toMatchObject({ reason: "UnsafePodSpec" });
    await until("the ungoverned pod gone", async () => (await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=hostnet1` })).items.every((p) => p.metadata!.deletionTimestamp));
    expect(sandboxOf("plain-hostnet1").status!.conditions!.find((c) => c.type === "Ready")).toMatchObject({ status: "False", reason: "UnsafePodSpec" });
    expect(events("Sandbox", "plain-hostnet1")).toContain("was deleted rather than left running ungoverned");
  });

  it("a pool whose members are refused shows a ReplicaFailure condition on its SandboxSet until its template changes", async () => {
    kubectlOk(["-n", ns, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxSet\nmetadata: { name: refusing }\nspec:\n  replicas: 0\n  template: { spec: { hostNetwork: true, containers: [{ name: sandbox, image: python:3.12 }] } }\n");
    await until("the set", () => driver.sandboxSets.get("refusing"));
    type SetStatus = { status?: { conditions?: { type: string; status: string; reason: string; message: string }[] } };
    const failure = () => kget<SetStatus>("sandboxset", "refusing").status?.conditions?.find((c) => c.type === "ReplicaFailure");
    // A warm member (unclaimed) of a governed pool: refused, and the set says why (the edge
    // deletes such members as they fail, so their own condition does not stay to be read).
    await expect(ensure(desired("refm1", { template: "refusing", pool: "refusing", claimed: false, allowInternetAccess: false }))).rejects.toMatchObject({ reason: "UnsafePodSpec" });
    await until("ReplicaFailure on the SandboxSet", () => failure());
    expect(failure()).toMatchObject({ status: "True", reason: "UnsafePodSpec", message: expect.stringContaining("hostNetwork") });
    // A template the proxy can govern: the condition goes, and its member runs.
    kubectlOk(["-n", ns, "patch", "sandboxset", "refusing", "--type", "json", "-p", JSON.stringify([{ op: "remove", path: "/spec/template/spec/hostNetwork" }])]);
    await until("the new template seen", () => !driver.sandboxSets.get("refusing")!.spec.template?.spec?.hostNetwork);
    await until("ReplicaFailure gone", () => !failure());
    await ensure(desired("refm2", { template: "refusing", pool: "refusing", claimed: false, allowInternetAccess: false }));
    expect((await podOf("refm2")).spec!.hostNetwork).toBeFalsy();
    expect(failure()).toBeUndefined();
  });

  it("a template container named as the platform's (traffic-ca) is refused with a condition and an Event, not dropped", async () => {
    await expect(ensure(desired("reserved1", { template: "reserved", pool: "reserved", allowInternetAccess: false }))).rejects.toMatchObject({ reason: "UnsafePodSpec" });
    expect((await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=reserved1` })).items).toHaveLength(0);
    const ready = kget<{ status?: { conditions?: { type: string; reason: string; message: string }[] } }>("sandbox", "reserved-reserved1").status!.conditions!.find((c) => c.type === "Ready")!;
    expect(ready).toMatchObject({ reason: "UnsafePodSpec", message: expect.stringContaining('initContainers "traffic-ca": the name is the traffic-proxy\'s') });
    expect(kubectlOk(["-n", ns, "get", "events", "--field-selector", "involvedObject.name=reserved-reserved1,reason=UnsafePodSpec", "-o", "jsonpath={.items[*].message}"])).toContain("traffic-ca");
  });

  it("a sandbox nothing governs has no proxy; a TrafficPolicy selecting it replaces its pod, and policy changes reach the ConfigMap", async () => {
    await ensure(desired("open1", { labels: { app: "web" } }));
    const before = await podOf("open1");
    expect(before.spec!.containers.map((c) => c.name)).toEqual(["sandbox", "agent-runtime"]);
    expect(kubectlOk(["-n", ns, "get", "configmap,networkpolicy", "-o", "name"])).not.toContain("open1");

    const web = entry(ns, "web", { priority: 10, selector: { matchLabels: { app: "web" } }, egress: { rules: [{ action: "allow", to: [{ fqdn: "*.example.com" }, { cidr: "10.20.0.0/16" }] }] } });
    await driver.setTrafficPolicies([web]);
    await until("a pod with the proxy", async () => {
      const pods = (await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=open1` })).items;
      return pods.some((p) => p.metadata!.uid !== before.metadata!.uid && hasProxy(p));
    });
    expect(kubectlOk(["-n", ns, "get", "events", "--field-selector", "involvedObject.name=plain-open1,reason=Recreated", "-o", "jsonpath={.items[*].message}"])).toContain("traffic-proxy");
    expect(policyFile("plain-open1").trafficPolicies.map((p) => p.name)).toEqual(["web"]);
    const proxied = (await podOf("open1")).metadata!.uid;

    // A second policy (global) joins; the rules1 sandbox (same team, no label) is selected by it only.
    const baseline = entry(null, "baseline", { egress: { rules: [{ action: "allow", to: [{ cidr: "192.168.7.0/24" }] }] } });
    await driver.setTrafficPolicies([web, baseline]);
    expect(policyFile("plain-open1").trafficPolicies.map((p) => p.name).sort()).toEqual(["baseline", "web"]);
    expect(policyFile("plain-rules1").trafficPolicies.map((p) => p.name)).toEqual(["baseline"]);
    // The running pod's annotation names the new files (the ConfigMap's policy.json and the
    // Secret's l7.json): the pod update makes the kubelet project them at once rather than at its
    // next periodic sync.
    const file = kget<{ data: Record<string, string> }>("configmap", "plain-open1-traffic").data["policy.json"]!;
    const l7 = Buffer.from(kget<{ data: Record<string, string> }>("secret", "plain-open1-traffic").data["l7.json"]!, "base64").toString();
    expect((await podOf("open1")).metadata!.annotations![POLICY_ANNOTATION]).toBe(createHash("sha256").update(file + l7).digest("hex").slice(0, 16));
    // The platform's (global) block opens the backstop; the team's own 10.20.0.0/16 does not.
    expect(kget<V1NetworkPolicy>("networkpolicy", "plain-open1-egress").spec!.egress![1]!.to).toEqual([{ ipBlock: { cidr: "0.0.0.0/0", except: DEFAULT_CLUSTER_CIDRS } }, { ipBlock: { cidr: "192.168.7.0/24" } }]);

    // Every policy gone: the proxy stays (pods are immutable) with an open policy, the backstop goes.
    await driver.setTrafficPolicies([]);
    expect(policyFile("plain-open1")).toMatchObject({ egress: null, trafficPolicies: [] });
    expect(kubectlOk(["-n", ns, "get", "networkpolicy", "-o", "name"])).not.toContain("open1");
    expect(kubectlOk(["-n", ns, "get", "networkpolicy", "-o", "name"])).toContain("plain-rules1-egress");

    // Policy changes went to the ConfigMaps: no pod that has the proxy was replaced for them.
    expect((await podOf("open1")).metadata!.uid).toBe(proxied);
    expect(hasProxy(await podOf("rules1"))).toBe(true);

    // Destroy removes the sandbox's egress objects with it.
    last.delete("rules1"); // the reconciler's part: a destroyed sandbox is not ensured again
    await driver.destroy("rules1");
    expect(kubectlOk(["-n", ns, "get", "configmap,networkpolicy", "-o", "name"])).not.toContain("rules1");
  });

  it("a warm pod of a template listing traffic-proxy starts open; claimed with rules, it is replaced by a governed one", async () => {
    await ensure(desired("warm1", { template: "listed", pool: "listed", claimed: false }));
    const warm = await podOf("warm1");
    expect(warm.metadata!.labels![LABEL.trafficProxy]).toBe("open");
    expect(hasProxy(warm)).toBe(true);
    expect(policyFile("listed-warm1")).toMatchObject({ egress: null, trafficPolicies: [] });
    expect(kubectlOk(["-n", ns, "get", "networkpolicy", "-o", "name"])).not.toContain("warm1");
    // An open proxy would tighten only after the kubelet's ConfigMap refresh: the claim gets a new pod.
    await ensure(desired("warm1", { template: "listed", pool: "listed", claimed: true, generation: 2, allowInternetAccess: false }));
    const claimed = await until("a governed pod", async () => {
      const pods = (await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=warm1` })).items;
      return pods.find((p) => p.metadata!.labels![LABEL.trafficProxy] === "governed" && !p.metadata!.deletionTimestamp);
    });
    expect(claimed.metadata!.uid).not.toBe(warm.metadata!.uid);
    expect(policyFile("listed-warm1").egress).toEqual({ allowOut: [], denyOut: ["0.0.0.0/0"] });
    expect(kubectlOk(["-n", ns, "get", "networkpolicy", "-o", "name"])).toContain("listed-warm1-egress");
  });

  it("no traffic-proxy image in the injection config: a governed sandbox is refused, never run open (a running one's pod is deleted)", async () => {
    const bare = await freshNamespace("egress-bare");
    const other = new KubernetesDriver({ kubeConfig: kubeConfig("agent"), namespace: bare, runtimeImage: "ghcr.io/kruise-edge/sandbox-agent:test" });
    await other.start();
    try {
      await expect(other.ensure({ ...desired("bare1", { allowInternetAccess: false }), namespace: bare, pool: undefined, template: "python:3.12" })).rejects.toMatchObject({ reason: "InvalidSpec" });
      expect(kubectlOk(["-n", bare, "get", "pods", "-o", "name"])).toBe("");
      // One running while nothing governed it: governed now, refused, and its pod goes.
      await other.ensure({ ...desired("bare2"), namespace: bare, pool: undefined, template: "python:3.12" });
      expect(kubectlOk(["-n", bare, "get", "pods", "-o", "name"])).toContain("bare2");
      await expect(other.ensure({ ...desired("bare2", { allowInternetAccess: false, generation: 2 }), namespace: bare, pool: undefined, template: "python:3.12" })).rejects.toMatchObject({ reason: "InvalidSpec", message: expect.stringContaining("deleted rather than left running ungoverned") });
      await until("the ungoverned pod gone", async () => (await core.listNamespacedPod({ namespace: bare, labelSelector: `${LABEL.sandboxId}=bare2` })).items.every((p) => p.metadata!.deletionTimestamp));
      expect(kubectlOk(["-n", bare, "get", "events", "--field-selector", "involvedObject.kind=Sandbox,reason=PodDeleted", "-o", "jsonpath={.items[*].message}"])).toContain("deleted rather than left running ungoverned");
    } finally {
      await other.stop();
    }
  });

  it("after an agent restart, a new pod of a sandbox only a TrafficPolicy governs has its proxy before the edge sends the set", async () => {
    const only = entry(ns, "only", { selector: { matchLabels: { app: "restart" } }, egress: { rules: [{ action: "allow", to: [{ fqdn: "pypi.org" }] }] } });
    await driver.setTrafficPolicies([only]);
    expect(kubectlOk(["-n", ns, "get", "configmap", POLICY_SET_CONFIGMAP, "-o", "name"])).toContain(POLICY_SET_CONFIGMAP);
    await driver.stop();
    await startAgent();
    // No setTrafficPolicies since the restart: the edge has not sent its set yet.
    await ensure(desired("after1", { labels: { app: "restart" } }));
    const pod = await podOf("after1");
    expect(pod.metadata!.labels![LABEL.trafficProxy]).toBe("governed");
    expect(hasProxy(pod)).toBe(true);
    expect(policyFile(pod.metadata!.name!).trafficPolicies.map((p) => p.name)).toEqual(["only"]);
    expect(kubectlOk(["-n", ns, "get", "networkpolicy", "-o", "name"])).toContain(`${pod.metadata!.name}-egress`);
  });

  it("a governed pod an older agent built from a template it sanitised stays Ready after the upgrade (policy push, in-place update at claim) with one Warning Event; its next pod is refused", async () => {
    const readyOf = () => kget<{ status?: { conditions?: { type: string; status: string; reason: string; message: string }[] } }>("sandbox", "plain-old1").status?.conditions?.find((c) => c.type === "Ready");
    const warnings = () => kubectlOk(["-n", ns, "get", "events", "--field-selector", "involvedObject.name=plain-old1,reason=UnsafePodSpec", "-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}"]).trim().split("\n").filter(Boolean);
    await ensure(desired("old1", { allowInternetAccess: false }));
    const pod = await podOf("old1");
    expect(pod.metadata!.labels![LABEL.trafficProxy]).toBe("governed");
    await until("Ready", async () => (await driver.observe("old1"))?.ready);
    // What an older agent left: its Sandbox keeps the template as the set asked for it (the node's
    // network, an init container named as the platform's CA one), its pod was built without them.
    await driver.stop();
    kubectlOk(["-n", ns, "patch", "sandbox", "plain-old1", "--type", "json", "-p", JSON.stringify([{ op: "add", path: "/spec/template/spec/hostNetwork", value: true }, { op: "add", path: "/spec/template/spec/initContainers", value: [{ name: "traffic-ca", image: "evil:1" }] }])]);
    await startAgent();
    // The upgraded agent: the edge's policy push, the reconciler's ensure, a claim's in-place update.
    await driver.setTrafficPolicies([]);
    await ensure(desired("old1", { allowInternetAccess: false }));
    await ensure(desired("old1", { allowInternetAccess: false, generation: 2, inplaceUpdate: { image: "python:3.13" } }));
    await ensure(desired("old1", { allowInternetAccess: false, generation: 3, inplaceUpdate: { image: "python:3.13" } }));
    expect((await podOf("old1")).metadata!.uid).toBe(pod.metadata!.uid);
    await until("Ready", async () => (await driver.observe("old1"))?.ready && readyOf()?.status === "True");
    expect(warnings()).toHaveLength(1);
    expect(warnings()[0]).toContain("hostNetwork");
    expect(warnings()[0]).toContain("keeps running");

    // Its next pod follows the rule: paused (Stop), then resumed, it is refused with the condition.
    await ensure(desired("old1", { allowInternetAccess: false, generation: 4, inplaceUpdate: { image: "python:3.13" }, state: "Paused" }));
    await until("the pod gone", async () => (await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=old1` })).items.every((p) => p.metadata!.deletionTimestamp));
    await expect(ensure(desired("old1", { allowInternetAccess: false, generation: 5, inplaceUpdate: { image: "python:3.13" } }))).rejects.toMatchObject({ reason: "UnsafePodSpec" });
    expect((await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=old1` })).items.filter((p) => !p.metadata!.deletionTimestamp)).toHaveLength(0);
    expect(readyOf()).toMatchObject({ status: "False", reason: "UnsafePodSpec", message: expect.stringContaining("hostNetwork") });
  });

  it("a governed pod stays when the injection config loses its traffic-proxy image; its next pod is refused", async () => {
    await ensure(desired("noimg1", { allowInternetAccess: false }));
    const pod = await podOf("noimg1");
    expect(pod.metadata!.labels![LABEL.trafficProxy]).toBe("governed");
    kubectlOk(["-n", ns, "patch", "configmap", "sandbox-injection-config", "--type", "json", "-p", JSON.stringify([{ op: "remove", path: "/data/traffic-proxy" }])]);
    try {
      await until("the config without the image", () => !driver.injection.current()["traffic-proxy"]);
      await ensure(desired("noimg1", { allowInternetAccess: false, generation: 2, inplaceUpdate: { image: "python:3.13" } }));
      expect((await podOf("noimg1")).metadata!.uid).toBe(pod.metadata!.uid);
      await ensure(desired("noimg1", { allowInternetAccess: false, generation: 3, state: "Paused" }));
      await expect(ensure(desired("noimg1", { allowInternetAccess: false, generation: 4 }))).rejects.toMatchObject({ reason: "InvalidSpec", message: expect.stringContaining("no traffic-proxy image") });
      expect((await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=noimg1` })).items.filter((p) => !p.metadata!.deletionTimestamp)).toHaveLength(0);
    } finally {
      kubectlOk(["-n", ns, "apply", "-f", "-"], readFileSync("k8s/injection-config.yaml", "utf8").replace("namespace: sandbox-system", `namespace: ${ns}`));
    }
  });
});
