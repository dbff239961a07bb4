// L7 SecurityProfiles in a sandbox pod, against the real API server: the agent's driver writes
// the profiles selecting a sandbox into its pod's Secret (l7.json; the ConfigMap keeps the L4
// half), and the pod gets the traffic-proxy for them. No kubelet runs containers here, so the pod as the API server holds it (its spec, its
// ConfigMap) is then run by test/kube/support/pod-netns.ts: the volumes laid out as the spec says,
// the init containers and the sidecar run as processes in a network namespace this test creates,
// and a "sandbox" process (uid 1000, no proxy variables, the sandbox container's env) talks to a
// stand-in internet through it. This is the sidecar's process, not a pod in a cluster. Also: a
// template's own init container runs after the redirect and the proxy (a native sidecar), so its
// connections are governed, and trusts the pod's CA (HTTPS to a profile's host); MCP tool rules; profiles too large for the pod's Secret.
// Needs root for the namespaces: run under the shared lock.
import { CoreV1Api, type V1Pod } from "@kubernetes/client-node";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KubernetesDriver, type KubeDesiredSandbox } from "../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { SecurityProfileSpec, type SecurityProfileEntry } from "../../schema/api/security-profile.ts";
import { LABEL } from "../../schema/crd/labels.ts";
import { TestKubelet } from "./support/kubelet.ts";
import { freshNamespace, kubeConfig, kubectlOk, until } from "./support/namespace.ts";
import { PodNetns, podObjects } from "./support/pod-netns.ts";
import { PolicySetStore, PROFILES } from "../../controllers/drivers/kubernetes/policy-store.ts";

let ns: string;
let driver: KubernetesDriver;
let kubelet: TestKubelet;
let core: CoreV1Api;
let net = new PodNetns();

const kget = <T>(kind: string, name: string): T => JSON.parse(kubectlOk(["-n", ns, "get", kind, name, "-o", "json"])) as T;

function desired(id: string, over: Partial<KubeDesiredSandbox> = {}): KubeDesiredSandbox {
  return { id, generation: 1, template: "plain", pool: "plain", namespace: ns, state: "Running", pauseStrategy: "Stop", resources: { cpuCount: 1, memoryMB: 512 }, allowInternetAccess: true, claimed: true, ...over };
}

const profile = (name: string, spec: unknown): SecurityProfileEntry => ({ team: ns, name, spec: SecurityProfileSpec.parse(spec), createdAt: 1 });

/** `pod` run as processes in network namespaces of its own (support/pod-netns.ts), in place of
 * the one run before. */
async function runPod(pod: V1Pod): Promise<void> {
  await net.stop();
  net = new PodNetns();
  await net.start(pod, podObjects(pod));
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
  // A template with an init container of its own that tries the network (straight to an address,
  // no DNS: an HTTP request to the stand-in) and writes what happened into an emptyDir: "reached"
  // once the stand-in's answer comes back ("saw ..."), "blocked" if none does within ~30 tries (the
  // stand-in may still be starting). An answer, not a connect: the redirect hands every connect
  // to the proxy, which accepts before it judges.
  const probe = "import socket,sys,time\\nr='blocked'\\nnl=bytes([13,10])\\nfor _ in range(30):\\n  try:\\n    c=socket.create_connection((sys.argv[1], 80), timeout=0.2); c.settimeout(2); c.sendall(b'GET /init HTTP/1.0'+nl+b'Host: '+sys.argv[1].encode()+nl+nl)\\n    if b'saw' in c.recv(200): r='reached'; break\\n  except OSError: pass\\n  time.sleep(0.2)\\nopen('/work/net','w').write(r)\\n";
  kubectlOk(["-n", ns, "apply", "-f", "-"], `apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxSet\nmetadata: { name: initnet }\nspec:\n  replicas: 0\n  template: { spec: { volumes: [{ name: work, emptyDir: {} }], initContainers: [{ name: fetch, image: python:3.12, command: [/usr/bin/python3, -c, "${probe}", "${net.outIp}"], volumeMounts: [{ name: work, mountPath: /work }] }], containers: [{ name: sandbox, image: python:3.12 }] } }\n`);
  await until("sets and injection config", () => driver.sandboxSets.get("plain") && driver.sandboxSets.get("initnet") && driver.injection.current()["traffic-proxy"]);
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
    // The profiles travel in the pod's Secret (l7.json), only those selecting it; the ConfigMap
    // holds the L4 half alone.
    const l7 = JSON.parse(Buffer.from(kget<{ data: Record<string, string> }>("secret", "plain-l7a-traffic").data["l7.json"]!, "base64").toString()) as { securityProfiles?: { name: string }[] };
    expect(l7.securityProfiles?.map((p) => p.name)).toEqual(["api-guard"]);
    const file = JSON.parse(kget<{ data: Record<string, string> }>("configmap", "plain-l7a-traffic").data["policy.json"]!) as Record<string, unknown>;
    expect(Object.keys(file).sort()).toEqual(["egress", "labels", "team", "trafficPolicies"]);

    // Programmed, honestly per pod: the selected pods whose traffic-proxy is ready (the test
    // kubelet reports l7a's containers ready; a held pod has no container ready).
    await until("l7a's sidecar ready", () => driver.profileEnforcement({ namespace: ns, name: "api-guard" }).ready === 1);
    expect(driver.profileEnforcement({ namespace: ns, name: "api-guard" })).toEqual({ selected: 1, ready: 1 });
    kubelet.hold.add("plain-l7h");
    await driver.ensure(desired("l7h", { labels: { app: "l7" } }));
    expect(driver.profileEnforcement({ namespace: ns, name: "api-guard" })).toEqual({ selected: 2, ready: 1 });
    expect(driver.profileEnforcement({ namespace: ns, name: "elsewhere" })).toEqual({ selected: 0, ready: 0 });

    await net.start(pod, podObjects(pod));
    const get = (url: string) => net.sandboxRun("sandbox", ["curl", "-sS", "--max-time", "8", "-w", " %{http_code}", url]);
    expect(get("http://api.test/ok")).toEqual({ code: 0, out: "saw GET /ok ['x-profile=api-guard'] 200" });
    expect(get("http://api.test/admin/users").out).toMatch(/ 451$/);
    // The sidecar shares the local proxy's handler: every reading of a path is judged (a second
    // decode makes /%2561dmin /admin), and an S3-style key goes as it came, `//` kept.
    expect(get("http://api.test/%2561dmin/users").out).toMatch(/ 451$/);
    expect(get("http://api.test/bucket//a//b;v=1?sig=a%2Fb")).toEqual({ code: 0, out: "saw GET /bucket//a//b;v=1?sig=a%2Fb ['x-profile=api-guard'] 200" });
    // A host no rule names passes untouched.
    expect(get("http://other.test/admin")).toEqual({ code: 0, out: "saw GET /admin [] 200" });
  });

  it("HTTPS through the pod's own CA: the sandbox containers trust it, only the sidecar holds its key, and each pod has another", async () => {
    const pod = (await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=l7a` })).items[0]!;
    const secret = kget<{ data: Record<string, string> }>("secret", "plain-l7a-traffic").data;
    const caCert = Buffer.from(secret["ca.crt"]!, "base64").toString();
    expect(caCert).toContain("BEGIN CERTIFICATE");
    expect(Buffer.from(secret["ca.key"]!, "base64").toString()).toContain("BEGIN PRIVATE KEY");

    // The pod spec: the Secret is a volume of the sidecar only; the CA's init container mounts
    // its certificate alone; the tenant's containers get the bundle (read-only) and the env.
    const mounts = (c: { volumeMounts?: { name: string }[] }) => (c.volumeMounts ?? []).map((m) => m.name);
    const secretVolumes = pod.spec!.volumes!.filter((v) => v.secret?.secretName === "plain-l7a-traffic");
    expect(secretVolumes.map((v) => [v.name, v.secret!.items ?? "all"])).toEqual([["sandbox-traffic-secret", "all"], ["sandbox-ca-source", [{ key: "ca.crt", path: "ca.crt" }]]]);
    for (const c of [...pod.spec!.containers, ...pod.spec!.initContainers!]) {
      if (c.name !== "traffic-proxy") expect(mounts(c)).not.toContain("sandbox-traffic-secret");
      if (c.name !== "traffic-ca") expect(mounts(c)).not.toContain("sandbox-ca-source");
    }
    for (const name of ["sandbox", "agent-runtime"]) {
      const c = pod.spec!.containers.find((x) => x.name === name)!;
      expect(c.volumeMounts).toContainEqual({ name: "sandbox-ca", mountPath: "/run/kruise", readOnly: true });
      expect(c.env).toEqual(expect.arrayContaining([{ name: "SSL_CERT_FILE", value: "/run/kruise/ca-bundle.crt" }, { name: "NODE_EXTRA_CA_CERTS", value: "/run/kruise/ca.crt" }]));
    }
    // The agent wrote the Secret, and cannot read it (or any Secret) back.
    await expect(kubeConfig("agent").makeApiClient(CoreV1Api).readNamespacedSecret({ namespace: ns, name: "plain-l7a-traffic" })).rejects.toMatchObject({ code: 403 });

    // What the traffic-ca init container left for the tenant's containers.
    expect(readFileSync(net.hostPath("sandbox", "/run/kruise/ca.crt"), "utf8")).toBe(caCert);
    expect(readFileSync(net.hostPath("sandbox", "/run/kruise/ca-bundle.crt"), "utf8")).toContain(caCert.trim());

    const get = (url: string, extra: string[] = []) => net.sandboxRun("sandbox", ["curl", "-sS", "--max-time", "8", "-w", " %{http_code}", ...extra, url]);
    // curl with the container's env only (SSL_CERT_FILE / CURL_CA_BUNDLE: the bundle).
    expect(get("https://api.test/ok")).toEqual({ code: 0, out: "saw GET /ok ['x-profile=api-guard'] 200" });
    expect(get("https://api.test/admin").out).toMatch(/ 451$/);
    // A host no rule names: the server's own certificate (the stand-in's root, not the pod's CA).
    expect(get("https://other.test/").code).toBe(60);
    expect(get("https://other.test/", ["--cacert", net.standInCa])).toEqual({ code: 0, out: "saw GET / [] 200" });

    // Another pod, another CA.
    await driver.ensure(desired("l7b", { labels: { app: "l7" } }));
    expect(kget<{ data: Record<string, string> }>("secret", "plain-l7b-traffic").data["ca.key"]).not.toBe(secret["ca.key"]);
  });

  it("profile and network.rules secrets reach the sidecar only: in the pod's Secret, in no sandbox container, added to HTTPS requests", async () => {
    const tag = Math.random().toString(36).slice(2, 10);
    const [key, rule, key2] = [`tok-${tag}`, `rule-${tag}`, `tok2-${tag}`];
    const keys = profile("keys", {
      selector: { matchLabels: { app: "keys" } },
      rules: [{ name: "key", match: [{ domains: ["api.test"] }], actions: { tokenTransformation: { type: "ApiKey", targetHeader: "x-api-key", apiKey: { valueTemplate: "Token {{ .apiKey }}" }, credentialRef: { secret: { name: "api-key" } } } } }],
    });
    // As the agent gets them from the edge: the team's profile secrets with the profile set, the
    // sandbox's own with its intent.
    driver.setProfileSecrets({ [ns]: { "api-key": key, unused: `unused-${tag}` } });
    driver.setSandboxSecrets("l7c", { rulekey: rule });
    await driver.setSecurityProfiles([keys]);
    await driver.ensure(desired("l7c", { labels: { app: "keys" }, networkRules: { "api.test": [{ transform: { headers: { "x-rule": "${e2b.secrets.rulekey}" } } }] } }));
    const pod = (await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=l7c` })).items[0]!;

    const secretsJson = () => JSON.parse(Buffer.from(kget<{ data: Record<string, string> }>("secret", "plain-l7c-traffic").data["secrets.json"]!, "base64").toString()) as Record<string, string>;
    expect(secretsJson()).toEqual({ "api-key": key, rulekey: rule });
    // Through kubectl: no container but the sidecar mounts that Secret, and no value is anywhere in
    // the pod's spec (env, args, volumes) or its ConfigMap.
    const asKubectl = kget<V1Pod>("pod", "plain-l7c");
    for (const c of [...asKubectl.spec!.containers, ...asKubectl.spec!.initContainers!]) {
      const secretMounts = (c.volumeMounts ?? []).filter((m) => asKubectl.spec!.volumes!.find((v) => v.name === m.name)?.secret);
      if (c.name === "traffic-proxy") expect(secretMounts.map((m) => m.name)).toEqual(["sandbox-traffic-secret"]);
      else if (c.name === "traffic-ca") expect(secretMounts.map((m) => m.name)).toEqual(["sandbox-ca-source"]);
      else expect(secretMounts).toEqual([]);
      // The runtime's own token (its pod's `-runtime` Secret) is the only Secret an env reads.
      expect((c.env ?? []).filter((e) => e.valueFrom?.secretKeyRef).map((e) => e.valueFrom!.secretKeyRef!.name)).toEqual(c.name === "agent-runtime" ? ["plain-l7c-runtime"] : []);
      expect(c.envFrom ?? []).toEqual([]);
    }
    const everything = JSON.stringify(asKubectl) + kubectlOk(["-n", ns, "get", "configmap", "plain-l7c-traffic", "-o", "json"]);
    for (const v of [key, rule, `unused-${tag}`]) expect(everything).not.toContain(v);

    await runPod(pod);
    const out = net.sandboxRun("sandbox", ["curl", "-sS", "--max-time", "8", "https://api.test/ok"]);
    expect(out).toEqual({ code: 0, out: `saw GET /ok ['x-api-key=Token ${key}', 'x-rule=${rule}']` });
    // The sandbox's own view: its env and the files of its mounts hold neither value.
    const view = net.sandboxRun("sandbox", ["sh", "-c", `env; cat ${net.hostPath("sandbox", "/run/kruise")}/*`]);
    expect(view.code).toBe(0);
    for (const v of [key, rule]) expect(view.out).not.toContain(v);

    // A secret the edge changes reaches the pod's Secret (the kubelet re-projects it).
    driver.setProfileSecrets({ [ns]: { "api-key": key2 } });
    await driver.setSecurityProfiles([keys]);
    expect(secretsJson()).toEqual({ "api-key": key2, rulekey: rule });
  });
  it("the template's own init containers run after the redirect and the proxy: their connections are governed as the sandbox's are", async () => {
    // Allowed: the stand-in's address is in allowOut. The proxy (a native sidecar on this 1.35
    // API server, third in the init order) is up before `fetch` runs, and passes it.
    await driver.ensure(desired("init1", { template: "initnet", pool: "initnet", allowInternetAccess: false, egress: { allowOut: [`${net.outIp}/32`], denyOut: [] } }));
    const pod = kget<V1Pod>("pod", "initnet-init1");
    expect(pod.spec!.initContainers!.map((c) => [c.name, c.restartPolicy ?? ""])).toEqual([["traffic-redirect", ""], ["traffic-ca", ""], ["traffic-proxy", "Always"], ["fetch", ""]]);
    await runPod(pod);
    // It ran in the pod's order, as uid 1000, and reached the stand-in through the proxy (with
    // the proxy a regular container it had no network at all: "blocked").
    expect(readFileSync(join(net.volumes.get("work")!, "net"), "utf8")).toBe("reached");

    // Denied: nothing allowed. The proxy refuses it, as it would the sandbox's own connection.
    await driver.ensure(desired("init2", { template: "initnet", pool: "initnet", allowInternetAccess: false }));
    await runPod(kget<V1Pod>("pod", "initnet-init2"));
    expect(readFileSync(join(net.volumes.get("work")!, "net"), "utf8")).toBe("blocked");
  });

  it("a template's own init container trusts the pod's CA: its HTTPS to a host a profile names goes through the proxy as the sandbox's does", async () => {
    await driver.setSecurityProfiles([profile("init-tls", { selector: { matchLabels: { app: "inittls" } }, rules: [{ name: "tag", match: [{ domains: ["api.test"] }], actions: { headerManipulation: { set: [{ name: "x-profile", value: "init-tls" }] } } }] })]);
    // curl with the init container's env only; what it got (and its exit code) in the emptyDir.
    const script = "curl -sS --max-time 8 -w ' %{http_code}' https://api.test/ok > /work/tls 2>&1; echo \" exit $?\" >> /work/tls";
    const set = { apiVersion: "agents.kruise.io/v1alpha1", kind: "SandboxSet", metadata: { name: "inittls" }, spec: { replicas: 0, template: { spec: { volumes: [{ name: "work", emptyDir: {} }], initContainers: [{ name: "fetch", image: "python:3.12", command: ["/bin/sh", "-c", script], volumeMounts: [{ name: "work", mountPath: "/work" }] }], containers: [{ name: "sandbox", image: "python:3.12" }] } } } };
    kubectlOk(["-n", ns, "apply", "-f", "-"], JSON.stringify(set));
    await until("set inittls", () => driver.sandboxSets.get("inittls"));
    await driver.ensure(desired("tls1", { template: "inittls", pool: "inittls", labels: { app: "inittls" } }));
    const pod = kget<V1Pod>("pod", "inittls-tls1");
    expect(pod.spec!.initContainers!.find((c) => c.name === "fetch")!.volumeMounts).toContainEqual({ name: "sandbox-ca", mountPath: "/run/kruise", readOnly: true });
    await runPod(pod);
    // Before, without the CA: curl's exit 60 (the proxy's certificate for api.test unknown).
    expect(readFileSync(join(net.volumes.get("work")!, "tls"), "utf8").trim()).toBe("saw GET /ok ['x-profile=init-tls'] 200 exit 0");
  });

  it("a GlobalSecurityProfile's literal header value reaches requests through the sidecar, and is in no ConfigMap and in no volume or env of the sandbox container", async () => {
    const token = `glob-${Math.random().toString(36).slice(2, 10)}`;
    const global: SecurityProfileEntry = {
      team: null,
      name: "platform-token",
      // A global profile sees only the platform's labels (review 25 M4): the template's and the team's (review 26 H2).
      spec: SecurityProfileSpec.parse({ selector: { matchLabels: { "agents.kruise.io/sandbox-template": "plain", "agents.kruise.io/sandbox-team": ns } }, rules: [{ name: "auth", match: [{ domains: ["api.test"] }], actions: { headerManipulation: { set: [{ name: "x-platform", value: token }] } } }] }),
      createdAt: 1,
    };
    await driver.setSecurityProfiles([global]);
    await driver.ensure(desired("l7g", { labels: { app: "glob" } }));
    const pod = (await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=l7g` })).items[0]!;
    expect(pod.metadata!.labels![LABEL.trafficProxy]).toBe("governed");

    // Every ConfigMap a kubectl user can list (the pod's, and the agent's stores: this test's
    // namespace is the agent's own too) is free of it.
    expect(kubectlOk(["get", "configmaps", "--all-namespaces", "-o", "json"])).not.toContain(token);
    // The sandbox container: no env holds it or takes a Secret, and each of its volumes' objects
    // (read as the kubelet would) is free of it.
    const asKubectl = kget<V1Pod>("pod", "plain-l7g");
    const sandbox = asKubectl.spec!.containers.find((c) => c.name === "sandbox")!;
    expect(JSON.stringify(sandbox.env ?? []) + JSON.stringify(sandbox.envFrom ?? [])).not.toContain(token);
    expect((sandbox.env ?? []).some((e) => e.valueFrom?.secretKeyRef || e.valueFrom?.configMapKeyRef)).toBe(false);
    for (const m of sandbox.volumeMounts ?? []) {
      const v = asKubectl.spec!.volumes!.find((x) => x.name === m.name)!;
      expect(v.secret).toBeUndefined();
      if (v.configMap) expect(kubectlOk(["-n", ns, "get", "configmap", v.configMap.name!, "-o", "json"])).not.toContain(token);
    }
    // The agent's store of the set is a Secret it can read back with its own identity (RBAC:
    // that one name), as a restarted agent does.
    expect(await new PolicySetStore(kubeConfig("agent").makeApiClient(CoreV1Api), ns, () => {}, PROFILES).load()).toEqual([global]);

    await runPod(pod);
    expect(net.sandboxRun("sandbox", ["curl", "-sS", "--max-time", "8", "http://api.test/ok"])).toEqual({ code: 0, out: `saw GET /ok ['x-platform=${token}']` });
    const view = net.sandboxRun("sandbox", ["sh", "-c", `env; cat ${net.hostPath("sandbox", "/run/kruise")}/*`]);
    expect(view.code).toBe(0);
    expect(view.out).not.toContain(token);
  });

  it("a profile's MCP tool rules in a pod: the sidecar passes an allowed tools/call and answers a denied one itself", async () => {
    await driver.setSecurityProfiles([
      profile("mcp-tools", {
        selector: { matchLabels: { app: "mcp" } },
        rules: [{ name: "tools", match: [{ domains: ["api.test"], paths: [{ type: "Exact", value: "/mcp" }] }], actions: { mcpToolPolicy: { rules: [{ toolNames: ["read_*"], action: "allow" }], defaultAction: "deny" } } }],
      }),
    ]);
    await driver.ensure(desired("mcp1", { labels: { app: "mcp" } }));
    const pod = (await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=mcp1` })).items[0]!;
    await runPod(pod);
    const call = (tool: string) => net.sandboxRun("sandbox", ["curl", "-sS", "--max-time", "8", "-H", "content-type: application/json", "-d", JSON.stringify({ jsonrpc: "2.0", id: 7, method: "tools/call", params: { name: tool, arguments: {} } }), "http://api.test/mcp"]);
    expect(call("read_file")).toEqual({ code: 0, out: "saw POST /mcp []" });
    const denied = call("delete_all");
    expect(denied.code).toBe(0);
    expect(denied.out).not.toContain("saw");
    expect(JSON.parse(denied.out)).toMatchObject({ jsonrpc: "2.0", id: 7, error: { code: -32001, data: { tool: "delete_all" } } });
    // Its audit record (the sidecar's stdout) names the tool and says the proxy answered.
    await until("the audit line", () => net.sidecarOut.includes('"tool":"delete_all"'));
    expect(net.sidecarOut).toMatch(/audit \{[^\n]*"tool":"delete_all"[^\n]*"refused":true/);
  });

  it("profiles too large for the pod's Secret: a running pod keeps what it had with a PolicyTooLarge Event; a new sandbox is refused (InvalidSpec), no pod", async () => {
    const small = profile("big-0", { selector: { matchLabels: { app: "big" } }, rules: [{ name: "r", match: [{ domains: ["api.test"] }], actions: { block: {} } }] });
    await driver.setSecurityProfiles([small]);
    await driver.ensure(desired("big1", { labels: { app: "big" } }));
    const before = kget<{ data: Record<string, string> }>("secret", "plain-big1-traffic").data["l7.json"];
    const rule = (i: number) => ({ name: `r${i}`, match: [{ domains: [`host-${i}.example.com`, `*.svc-${i}.example.net`], paths: [{ type: "Prefix", value: `/api/v1/resource-${i}` }] }], actions: { headerManipulation: { set: [{ name: "x-platform-token", value: `literal-${i}-${"t".repeat(40)}` }] } } });
    const huge = Array.from({ length: 200 }, (_, n) => profile(`big-${n}`, { selector: { matchLabels: { app: "big" } }, rules: Array.from({ length: 50 }, (_, i) => rule(i)) }));
    await driver.setSecurityProfiles(huge);
    const events = () => kubectlOk(["-n", ns, "get", "events", "--field-selector", "involvedObject.name=plain-big1,reason=PolicyTooLarge", "-o", "jsonpath={.items[*].message}"]);
    expect(events()).toMatch(/takes \d+ bytes in its pod's Secret, over the \d+ one object may hold.*keeps the policy it had/);
    expect(kget<{ data: Record<string, string> }>("secret", "plain-big1-traffic").data["l7.json"]).toBe(before);
    await expect(driver.ensure(desired("big2", { labels: { app: "big" } }))).rejects.toMatchObject({ reason: "InvalidSpec" });
    expect((await core.listNamespacedPod({ namespace: ns, labelSelector: `${LABEL.sandboxId}=big2` })).items).toHaveLength(0);
    const ready = kget<{ status?: { conditions?: { type: string; reason: string; message: string }[] } }>("sandbox", "plain-big2").status!.conditions!.find((c) => c.type === "Ready")!;
    expect(ready).toMatchObject({ reason: "InvalidSpec", message: expect.stringContaining("over the") });
    await driver.setSecurityProfiles([]);
  });
});
