// The pure half of a governed pod's egress (traffic-pod.ts): which sandboxes are governed and by
// what, E2B's allowInternetAccess as rules, the NetworkPolicy's extra blocks, which templates
// cannot be governed, the init containers' order, and the agent's --cluster-cidrs flag.
import type { V1PodSpec } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { clusterCidrsFlag, clusterDnsFlag, nativeSidecarsFlag } from "../../../../../controllers/drivers/kubernetes/flags.ts";
import { allowedInside, CA_DIR, CA_ENV, checkSize, DEFAULT_CLUSTER_CIDRS, injectTraffic, nativeSidecarsFor, podEgress, podPolicy, PolicyTooLargeError, trafficConfigMap, trafficSecret, unsafePodSpec } from "../../../../../controllers/drivers/kubernetes/traffic-pod.ts";
import { SecurityProfileSpec, type SecurityProfileEntry } from "../../../../../schema/api/security-profile.ts";
import { TrafficPolicySet } from "../../../../../controllers/traffic/governed.ts";
import { TrafficPolicySpec } from "../../../../../schema/api/traffic-policy.ts";
import { PodTrafficPolicySchema } from "../../../../../schema/protocol/pod-traffic.ts";

const set = new TrafficPolicySet();
set.replace([
  { team: "team-a", name: "web", spec: TrafficPolicySpec.parse({ selector: { matchLabels: { app: "web" } }, egress: { rules: [{ action: "allow", to: [{ cidr: "10.9.0.7" }, { fqdn: "db.internal" }] }] } }) },
  { team: "team-b", name: "other", spec: TrafficPolicySpec.parse({ egress: { rules: [{ action: "allow", to: [{ cidr: "192.168.1.0/24" }] }] } }) },
  { team: null, name: "base", spec: TrafficPolicySpec.parse({ selector: { matchLabels: { "agents.kruise.io/sandbox-template": "x", "agents.kruise.io/sandbox-team": "team-c" } }, egress: { rules: [{ action: "reject", to: [{ cidr: "0.0.0.0/0" }] }] } }) },
  { team: null, name: "platform", spec: TrafficPolicySpec.parse({ selector: { matchLabels: { "agents.kruise.io/sandbox-template": "web" }, matchExpressions: [{ key: "agents.kruise.io/sandbox-team", operator: "In", values: ["team-a"] }] }, egress: { rules: [{ action: "allow", to: [{ cidr: "10.50.1.9/16" }, { cidr: "8.8.8.8" }] }, { action: "reject", to: [{ cidr: "10.60.0.0/16" }] }] } }) },
]);

describe("traffic-pod", () => {
  it("a profile's half (literal header values included) goes in the Secret, never the ConfigMap; an oversized one is refused with the reason", () => {
    const rule = (i: number) => ({ name: `r${i}`, match: [{ domains: [`host-${i}.example.com`, `*.svc-${i}.example.net`], paths: [{ type: "Prefix", value: `/api/v1/resource-${i}` }] }], actions: { headerManipulation: { set: [{ name: "x-platform-token", value: `literal-${i}-${"t".repeat(40)}` }] } } });
    const profiles: SecurityProfileEntry[] = Array.from({ length: 200 }, (_, n) => ({ team: null, name: `g${n}`, spec: SecurityProfileSpec.parse({ rules: Array.from({ length: 50 }, (_, i) => rule(i)) }), createdAt: 1 }));
    const p = podPolicy(set, { allowInternetAccess: true, labels: {} }, "team-a", profiles.slice(0, 1))!;
    const owned = { pod: "p", namespace: "team-a", labels: {}, owner: { apiVersion: "v1", kind: "x", name: "x", uid: "x" } };
    const cm = trafficConfigMap(owned, p);
    expect(JSON.stringify(cm)).not.toContain("literal-0-");
    expect(Object.keys(JSON.parse(cm.data!["policy.json"]!) as object).sort()).toEqual(["egress", "labels", "team", "trafficPolicies"]);
    const secret = trafficSecret(owned, { cert: "c", key: "k" }, {}, { securityProfiles: p.securityProfiles! }, "token");
    expect(Buffer.from(secret.data!["l7.json"]!, "base64").toString()).toContain("literal-0-");
    expect(() => checkSize("s1", "Secret", secret.data!)).not.toThrow();
    // 200 profiles of 50 rules selecting one sandbox: over what one object may hold.
    const all = podPolicy(set, { allowInternetAccess: true, labels: {} }, "team-a", profiles)!;
    const big = trafficSecret(owned, { cert: "c", key: "k" }, {}, { securityProfiles: all.securityProfiles! }, "token");
    expect(() => checkSize("s1", "Secret", big.data!)).toThrow(PolicyTooLargeError);
    expect(() => checkSize("s1", "Secret", big.data!)).toThrow(/sandbox s1 takes \d+ bytes in its pod's Secret, over the \d+ one object may hold/);
  });

  it("E2B's rules as a pod enforces them", () => {
    expect(podEgress({ allowInternetAccess: true })).toBeNull();
    expect(podEgress({ allowInternetAccess: true, egress: { allowOut: [], denyOut: ["1.2.3.4"] } })).toEqual({ allowOut: [], denyOut: ["1.2.3.4"] });
    expect(podEgress({ allowInternetAccess: false })).toEqual({ allowOut: [], denyOut: ["0.0.0.0/0"] });
    expect(podEgress({ allowInternetAccess: false, egress: { allowOut: ["pypi.org"], denyOut: [] } })).toEqual({ allowOut: ["pypi.org"], denyOut: ["0.0.0.0/0"] });
  });

  it("only the policies that select the sandbox (its team's and global ones) travel, and the file parses", () => {
    expect(podPolicy(set, { allowInternetAccess: true, labels: { app: "api" }, pool: "api" }, "team-a")).toBeNull();
    const p = podPolicy(set, { allowInternetAccess: true, labels: { app: "web" }, pool: "web" }, "team-a")!;
    expect(p.trafficPolicies.map((e) => e.name)).toEqual(["platform", "web"]);
    // The proxy selects again from these labels: the platform's is among them.
    expect(p.labels).toEqual({ app: "web", "agents.kruise.io/sandbox-template": "web", "agents.kruise.io/sandbox-team": "team-a" });
    expect(PodTrafficPolicySchema.parse(JSON.parse(JSON.stringify(p)))).toEqual(p);
    expect(podPolicy(set, { allowInternetAccess: true, labels: {}, pool: "x" }, "team-c")!.trafficPolicies.map((e) => e.name)).toEqual(["base"]);
  });

  it("a tenant's labels never select a global policy, nor open its cluster ranges: only the platform's template label does (review 25 M4)", () => {
    // E2B `label:agents.kruise.io/sandbox-template` is refused at the edge; were it to arrive, the platform's value wins.
    const forged = { app: "web", tier: "x", "agents.kruise.io/sandbox-template": "web" };
    const p = podPolicy(set, { allowInternetAccess: true, labels: forged, pool: "api" }, "team-a")!;
    expect(p.trafficPolicies.map((e) => e.name)).toEqual(["web"]);
    expect(p.labels["agents.kruise.io/sandbox-template"]).toBe("api");
    expect(allowedInside(p, DEFAULT_CLUSTER_CIDRS)).toEqual([]);
    // A global profile selecting by a tenant's label travels to no pod.
    const profile = (selector: object): SecurityProfileEntry => ({ team: null, name: "g", spec: SecurityProfileSpec.parse({ selector, rules: [] }), createdAt: 1 });
    expect(podPolicy(set, { allowInternetAccess: true, labels: { app: "web" }, pool: "api" }, "team-a", [profile({ matchLabels: { app: "web" } })])!.securityProfiles).toBeUndefined();
    expect(podPolicy(set, { allowInternetAccess: true, labels: { app: "web" }, pool: "api" }, "team-a", [profile({ matchLabels: { "agents.kruise.io/sandbox-template": "api", "agents.kruise.io/sandbox-team": "team-a" } })])!.securityProfiles).toHaveLength(1);
    // Nor can a tenant's label take its sandbox out of one (NotIn / DoesNotExist on a key it sets).
    const optOut = profile({ matchExpressions: [{ key: "tier", operator: "DoesNotExist" }] });
    expect(podPolicy(set, { allowInternetAccess: true, labels: { tier: "free" }, pool: "api" }, "team-a", [optOut])!.securityProfiles).toHaveLength(1);
  });

  it("another team's template of the selected name gets no global grant: the team label, which the tenant cannot choose, decides (review 26 H2)", () => {
    // team-b names its own template "web", as team-a's the platform grant selects.
    const p = podPolicy(set, { allowInternetAccess: false, labels: {}, pool: "web" }, "team-b")!;
    expect(p.labels).toEqual({ "agents.kruise.io/sandbox-template": "web", "agents.kruise.io/sandbox-team": "team-b" });
    expect(p.trafficPolicies.map((e) => e.name)).toEqual(["other"]);
    expect(allowedInside(p, DEFAULT_CLUSTER_CIDRS)).toEqual([]);
    // A forged team label is dropped: the namespace's name wins.
    expect(podPolicy(set, { allowInternetAccess: false, labels: { "agents.kruise.io/sandbox-team": "team-a" }, pool: "web" }, "team-b")!.trafficPolicies.map((e) => e.name)).toEqual(["other"]);
  });

  it("the backstop opens inside the cluster's ranges only what a GlobalTrafficPolicy allows, canonical; never a tenant's own rule", () => {
    const p = podPolicy(set, { allowInternetAccess: false, egress: { allowOut: ["172.20.1.9/16", "169.254.169.254", "8.8.8.8", "pypi.org", "fd00::1"], denyOut: [] }, labels: { app: "web" }, pool: "web" }, "team-a")!;
    // 172.20/16 and 169.254.169.254 (allowOut) and 10.9.0.7 (team-a's policy) stay closed.
    expect(allowedInside(p, DEFAULT_CLUSTER_CIDRS)).toEqual(["10.50.0.0/16"]);
    const tenantOnly = podPolicy(set, { allowInternetAccess: false, egress: { allowOut: ["10.0.0.0/8", "169.254.0.0/16"], denyOut: [] }, labels: { app: "api" }, pool: "api" }, "team-a")!;
    expect(allowedInside(tenantOnly, DEFAULT_CLUSTER_CIDRS)).toEqual([]);
  });

  it("the redirect and the CA init containers run first, before the template's own; the other containers keep the drops", () => {
    const spec: V1PodSpec = { containers: [{ name: "sandbox", image: "x", securityContext: { capabilities: { add: ["CHOWN"], drop: ["MKNOD"] } } }], initContainers: [{ name: "setup", image: "x" }, { name: "fetch", image: "y" }] };
    expect(unsafePodSpec(spec)).toEqual([]);
    injectTraffic(spec, { kind: "sidecar", image: "proxy:1" }, "cm");
    expect(spec.initContainers!.map((c) => [c.name, c.image])).toEqual([["traffic-redirect", "proxy:1"], ["traffic-ca", "proxy:1"], ["setup", "x"], ["fetch", "y"]]);
    expect(spec.containers.map((c) => c.name)).toEqual(["sandbox", "traffic-proxy"]);
    expect(spec.containers[0]!.securityContext).toEqual({ privileged: false, capabilities: { add: ["CHOWN"], drop: ["MKNOD", "NET_ADMIN", "NET_RAW", "SYS_ADMIN", "SYS_PTRACE", "BPF"] } });
  });

  it("as a native sidecar the proxy is the third init container, kept running, with a startup probe: the template's init containers start once it answers", () => {
    const spec: V1PodSpec = { containers: [{ name: "sandbox", image: "x" }], initContainers: [{ name: "setup", image: "x" }] };
    injectTraffic(spec, { kind: "sidecar", image: "proxy:1" }, "cm", true);
    expect(spec.initContainers!.map((c) => [c.name, c.restartPolicy ?? ""])).toEqual([["traffic-redirect", ""], ["traffic-ca", ""], ["traffic-proxy", "Always"], ["setup", ""]]);
    expect(spec.containers.map((c) => c.name)).toEqual(["sandbox"]);
    expect(spec.initContainers![2]!.startupProbe).toMatchObject({ httpGet: { path: "/ready", port: 15021 } });
  });

  it("the template's init containers trust the pod's CA as its containers do (they connect through the proxy, which signs L7 hosts with it); the platform's own do not mount it", () => {
    for (const native of [true, false]) {
      const spec: V1PodSpec = {
        containers: [{ name: "sandbox", image: "x" }],
        initContainers: [{ name: "fetch", image: "y", env: [{ name: "SSL_CERT_FILE", value: "/etc/mine.pem" }, { name: "KEEP", value: "1" }], volumeMounts: [{ name: "data", mountPath: "/data" }] }],
      };
      injectTraffic(spec, { kind: "sidecar", image: "proxy:1" }, "cm", native);
      const all = [...spec.initContainers!, ...spec.containers];
      const trusting = all.filter((c) => c.volumeMounts?.some((m) => m.mountPath === CA_DIR && m.readOnly)).map((c) => c.name);
      expect(trusting).toEqual(["fetch", "sandbox"]);
      for (const name of ["fetch", "sandbox"]) {
        const c = all.find((x) => x.name === name)!;
        for (const e of CA_ENV) expect(c.env).toContainEqual(e);
        // The template's own value of a CA name is replaced, its other env kept.
        expect(c.env!.filter((e) => e.name === "SSL_CERT_FILE")).toHaveLength(1);
      }
      expect(all.find((c) => c.name === "fetch")!.env).toContainEqual({ name: "KEEP", value: "1" });
      expect(all.find((c) => c.name === "fetch")!.volumeMounts).toContainEqual({ name: "data", mountPath: "/data" });
    }
  });

  it("native sidecars from 1.33 (whose kubelets, three minors back at most, all know them); --native-sidecars", () => {
    expect(nativeSidecarsFor({ major: "1", minor: "35" })).toBe(true);
    expect(nativeSidecarsFor({ major: "1", minor: "33+" })).toBe(true);
    expect(nativeSidecarsFor({ major: "1", minor: "32" })).toBe(false);
    expect(nativeSidecarsFor({ major: "1", minor: "29" })).toBe(false);
    expect(nativeSidecarsFor({ major: "2", minor: "0" })).toBe(true);
    expect(nativeSidecarsFor({})).toBe(false);
    expect(nativeSidecarsFlag(undefined)).toBeUndefined();
    expect(nativeSidecarsFlag("auto")).toBeUndefined();
    expect(nativeSidecarsFlag("on")).toBe(true);
    expect(nativeSidecarsFlag("off")).toBe(false);
    expect(() => nativeSidecarsFlag("yes")).toThrow(/auto, on or off/);
  });

  it("a template asking for what escapes the redirect is refused, each field named; a safe one passes", () => {
    const evil = { privileged: true, capabilities: { add: ["NET_ADMIN"] } };
    const spec: V1PodSpec = {
      hostNetwork: true,
      hostPID: true,
      hostIPC: true,
      securityContext: { sysctls: [{ name: "net.ipv4.tcp_syncookies", value: "1" }, { name: "net.ipv4.conf.all.route_localnet", value: "1" }] },
      volumes: [{ name: "docker", hostPath: { path: "/var/run/docker.sock" } }, { name: "sandbox-traffic-secret", emptyDir: {} }],
      containers: [
        { name: "traffic-redirect", image: "evil", securityContext: structuredClone(evil) },
        { name: "sandbox", image: "x", securityContext: { procMount: "Unmasked", capabilities: { add: ["ALL", "CHOWN", "cap_net_raw", "SYS_NICE"] } }, volumeMounts: [{ name: "sandbox-traffic", mountPath: "/x" }, { name: "docker", mountPath: "/run/kruise/ca.crt" }] },
      ],
      initContainers: [{ name: "setup", image: "x", securityContext: { privileged: true } }],
    };
    expect(unsafePodSpec(spec)).toEqual([
      "hostNetwork: the pod would use the node's network, outside its own network namespace (and any redirect there)",
      "hostPID: the node's processes (and their network namespaces) would be in reach",
      "hostIPC: the node's IPC namespace would be shared",
      'securityContext.sysctls "net.ipv4.conf.all.route_localnet": only the Pod Security Standards\' safe sysctls may be set',
      'volume "docker": hostPath "/var/run/docker.sock" reaches the node\'s files (its sockets, /proc, /sys)',
      'volume "sandbox-traffic-secret": the name is the traffic-proxy\'s',
      'initContainers "setup": privileged',
      'containers "traffic-redirect": the name is the traffic-proxy\'s',
      'containers "traffic-redirect": privileged',
      expect.stringMatching(/^containers "traffic-redirect": capabilities.add NET_ADMIN \(allowed: AUDIT_WRITE, /),
      expect.stringMatching(/^containers "sandbox": capabilities.add ALL, cap_net_raw, SYS_NICE \(allowed: /),
      'containers "sandbox": procMount Unmasked',
      'containers "sandbox": mounts "sandbox-traffic", the traffic-proxy\'s volume',
      'containers "sandbox": mounts a volume at /run/kruise, where the pod\'s CA bundle goes',
    ]);
    // Root, the allowed capabilities, safe sysctls and procMount Default are the tenant's to ask.
    const fine: V1PodSpec = {
      securityContext: { runAsUser: 0, sysctls: [{ name: "net.ipv4.ip_local_port_range", value: "1024 65000" }] },
      volumes: [{ name: "data", emptyDir: {} }],
      containers: [{ name: "sandbox", image: "x", securityContext: { runAsUser: 0, allowPrivilegeEscalation: true, procMount: "Default", capabilities: { add: ["CAP_CHOWN", "NET_BIND_SERVICE"] } }, volumeMounts: [{ name: "data", mountPath: "/data" }] }],
    };
    expect(unsafePodSpec(fine)).toEqual([]);
  });

  it("every pod is judged, governed or not: node access, the platform's Secrets, a service account's token, Unconfined, operator fields and claims are refused; the proxy's names only where it runs", () => {
    const spec: V1PodSpec = {
      hostPID: true,
      nodeName: "cp-1",
      priorityClassName: "platform-critical",
      runtimeClassName: "runc",
      serviceAccountName: "deployer",
      automountServiceAccountToken: true,
      securityContext: { seccompProfile: { type: "Unconfined" } },
      volumes: [
        { name: "root", hostPath: { path: "/" } },
        { name: "peek", secret: { secretName: "plain-abc-traffic" } },
        { name: "proj", projected: { sources: [{ secret: { name: "other-traffic" } }, { serviceAccountToken: { path: "t" } }, { configMap: { name: "plain-abc-traffic" } }] } },
        { name: "mine", secret: { secretName: "team-creds" } },
        { name: "warm", secret: { secretName: "pool-abc-runtime" } },
        { name: "sandbox-traffic", emptyDir: {} },
      ],
      containers: [{
        name: "sandbox",
        image: "x",
        securityContext: { privileged: true, appArmorProfile: { type: "Unconfined" }, seLinuxOptions: { type: "spc_t" } },
        ports: [{ containerPort: 80, hostPort: 80 }],
        env: [{ name: "L7", valueFrom: { secretKeyRef: { name: "plain-abc-traffic", key: "l7.json" } } }, { name: "OK", valueFrom: { secretKeyRef: { name: "team-creds", key: "k" } } }],
        envFrom: [{ secretRef: { name: "plain-abc-traffic" } }, { configMapRef: { name: "plain-abc-traffic" } }],
        volumeMounts: [{ name: "x", mountPath: "/run/kruise" }],
      }, { name: "traffic-proxy", image: "x" }],
    };
    const vcts = [{ metadata: { name: "data" }, spec: { volumeName: "team-b-pv", dataSourceRef: { kind: "VolumeSnapshot", name: "s", namespace: "team-b" } } }, { metadata: { name: "ok" }, spec: { dataSourceRef: { kind: "VolumeSnapshot", name: "s" } } }];
    const annotations = { "container.apparmor.security.beta.kubernetes.io/sandbox": "unconfined", "container.seccomp.security.alpha.kubernetes.io/sandbox": "unconfined", "example.com/fine": "unconfined" };
    expect(unsafePodSpec(spec, { proxied: false, annotations, volumeClaimTemplates: vcts })).toEqual([
      "hostPID: the node's processes (and their network namespaces) would be in reach",
      "securityContext: seccompProfile Unconfined",
      'nodeName "cp-1": the operator\'s to set (the injection config\'s pod-policy does not allow it)',
      'priorityClassName "platform-critical": the operator\'s to set (the injection config\'s pod-policy does not allow it)',
      'runtimeClassName "runc": the operator\'s to set (the injection config\'s pod-policy does not allow it)',
      'serviceAccountName "deployer" with automountServiceAccountToken: the pod would hold that service account\'s token, created with the agent\'s rights',
      'volume "proj": a serviceAccountToken of "deployer"',
      'volume "root": hostPath "/" reaches the node\'s files (its sockets, /proc, /sys)',
      'volume "peek": Secret "plain-abc-traffic" is the platform\'s (a pod\'s traffic or runtime-token Secret)',
      'volume "proj": Secret "other-traffic" is the platform\'s (a pod\'s traffic or runtime-token Secret)',
      'volume "warm": Secret "pool-abc-runtime" is the platform\'s (a pod\'s traffic or runtime-token Secret)',
      'containers "sandbox": privileged',
      'containers "sandbox": appArmorProfile Unconfined',
      expect.stringMatching(/^containers "sandbox": seLinuxOptions \{"type":"spc_t"\} \(baseline allows/),
      'containers "sandbox": hostPort 80 opens a port of the node',
      'containers "sandbox": env "L7" reads Secret "plain-abc-traffic", the platform\'s',
      'containers "sandbox": envFrom Secret "plain-abc-traffic", the platform\'s',
      'annotation "container.apparmor.security.beta.kubernetes.io/sandbox": unconfined',
      'annotation "container.seccomp.security.alpha.kubernetes.io/sandbox": unconfined',
      'volumeClaimTemplates "data": volumeName binds a PersistentVolume by name, which may be another team\'s',
      'volumeClaimTemplates "data": dataSourceRef from namespace "team-b": only the sandbox\'s own namespace',
    ]);
    // With the proxy, its names and the CA directory are reserved as well.
    const proxied = unsafePodSpec(spec, { proxied: true });
    expect(proxied).toContain('volume "sandbox-traffic": the name is the traffic-proxy\'s');
    expect(proxied).toContain('containers "traffic-proxy": the name is the traffic-proxy\'s');
    expect(proxied).toContain('containers "sandbox": mounts a volume at /run/kruise, where the pod\'s CA bundle goes');
    // The operator's pod-policy lifts its fields; the default service account, or one without a
    // token, is fine.
    const placed: V1PodSpec = { nodeName: "n1", priorityClassName: "p", runtimeClassName: "gvisor", serviceAccountName: "deployer", containers: [{ name: "sandbox", image: "x" }] };
    expect(unsafePodSpec(placed, { proxied: false, allow: ["nodeName", "priorityClassName", "runtimeClassName"] })).toEqual([]);
    expect(unsafePodSpec({ ...placed, serviceAccountName: "default", automountServiceAccountToken: true }, { proxied: false, allow: ["nodeName", "priorityClassName", "runtimeClassName"] })).toEqual([]);
  });

  it("placement is the operator's: tolerations, node selection and affinity to other namespaces' pods are refused unless pod-policy allows them, whole or key by key (review 25 M5)", () => {
    const spec: V1PodSpec = {
      tolerations: [{ operator: "Exists" }, { key: "dedicated", operator: "Equal", value: "team-b", effect: "NoSchedule" }, { key: "gpu", operator: "Exists" }],
      nodeSelector: { tenant: "team-b", "node.kubernetes.io/instance-type": "m5.large" },
      affinity: {
        nodeAffinity: {
          requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [{ matchExpressions: [{ key: "node-role.kubernetes.io/control-plane", operator: "Exists" }], matchFields: [{ key: "metadata.name", operator: "In", values: ["cp-1"] }] }] },
          preferredDuringSchedulingIgnoredDuringExecution: [{ weight: 1, preference: { matchExpressions: [{ key: "tenant", operator: "In", values: ["team-b"] }] } }],
        },
        podAffinity: { requiredDuringSchedulingIgnoredDuringExecution: [{ topologyKey: "kubernetes.io/hostname", namespaceSelector: {}, labelSelector: { matchLabels: { app: "db" } } }] },
        podAntiAffinity: { preferredDuringSchedulingIgnoredDuringExecution: [{ weight: 1, podAffinityTerm: { topologyKey: "kubernetes.io/hostname", namespaces: ["team-b"] } }] },
      },
      containers: [{ name: "sandbox", image: "x" }],
    };
    const NOT = ": the operator's to set (the injection config's pod-policy does not allow it)";
    expect(unsafePodSpec(spec, { proxied: false })).toEqual([
      `tolerations "(every taint)"${NOT}`,
      `tolerations "dedicated"${NOT}`,
      `tolerations "gpu"${NOT}`,
      `nodeSelector "tenant"${NOT}`,
      `nodeSelector "node.kubernetes.io/instance-type"${NOT}`,
      `affinity.nodeAffinity "node-role.kubernetes.io/control-plane"${NOT}`,
      `affinity.nodeAffinity "field metadata.name"${NOT}`,
      `affinity.nodeAffinity "tenant"${NOT}`,
      `affinity.podAffinity to other namespaces' pods (namespaces or a namespaceSelector)${NOT}`,
      `affinity.podAntiAffinity to other namespaces' pods (namespaces or a namespaceSelector)${NOT}`,
    ]);
    // Key by key: the allowed keys pass; a key-less toleration and a node named by field do not.
    expect(unsafePodSpec(spec, { proxied: false, tolerationKeys: ["dedicated", "gpu"], nodeSelectorKeys: ["tenant", "node.kubernetes.io/instance-type", "node-role.kubernetes.io/control-plane"] })).toEqual([
      `tolerations "(every taint)"${NOT}`,
      `affinity.nodeAffinity "field metadata.name"${NOT}`,
      `affinity.podAffinity to other namespaces' pods (namespaces or a namespaceSelector)${NOT}`,
      `affinity.podAntiAffinity to other namespaces' pods (namespaces or a namespaceSelector)${NOT}`,
    ]);
    expect(unsafePodSpec(spec, { proxied: false, allow: ["tolerations", "nodeSelector", "affinity"] })).toEqual([]);
    // Spreading the tenant's own sandboxes (its namespace's pods) is its own business.
    const own: V1PodSpec = { affinity: { podAntiAffinity: { requiredDuringSchedulingIgnoredDuringExecution: [{ topologyKey: "kubernetes.io/hostname", labelSelector: { matchLabels: { app: "web" } } }] } }, containers: [{ name: "sandbox", image: "x" }] };
    expect(unsafePodSpec(own, { proxied: false })).toEqual([]);
  });

  it("a second scheduler is the operator's: schedulerName is refused unless pod-policy allows it; the default scheduler's name passes (review 26 M7)", () => {
    const spec: V1PodSpec = { schedulerName: "my-scheduler", containers: [{ name: "sandbox", image: "x" }] };
    expect(unsafePodSpec(spec, { proxied: false })).toEqual(['schedulerName "my-scheduler": the operator\'s to set (the injection config\'s pod-policy does not allow it)']);
    expect(unsafePodSpec(spec, { proxied: false, allow: ["schedulerName"] })).toEqual([]);
    expect(unsafePodSpec({ ...spec, schedulerName: "default-scheduler" }, { proxied: false })).toEqual([]);
  });

  it("resources the quota does not count (extended resources, hugepages, resource claims) are refused unless pod-policy allows them, key by key (review 26 M7)", () => {
    const spec: V1PodSpec = {
      resources: { limits: { "hugepages-1Gi": "2Gi" } },
      resourceClaims: [{ name: "gpu", resourceClaimTemplateName: "gpu-template" }],
      initContainers: [{ name: "warm", image: "x", resources: { requests: { "example.com/fpga": "1" }, limits: { cpu: "1", memory: "1Gi" } } }],
      containers: [{ name: "sandbox", image: "x", resources: { limits: { cpu: "1", memory: "1Gi", "ephemeral-storage": "1Gi", "nvidia.com/gpu": "1", "hugepages-2Mi": "64Mi" }, claims: [{ name: "gpu" }] } }],
    };
    const NOT = ": the quota does not count it (the injection config's pod-policy does not allow it)";
    expect(unsafePodSpec(spec, { proxied: false })).toEqual([
      `the pod: resources "hugepages-1Gi"${NOT}`,
      `resources (pod-level)${NOT}`,
      `container "warm": resources "example.com/fpga"${NOT}`,
      `container "sandbox": resources "nvidia.com/gpu"${NOT}`,
      `container "sandbox": resources "hugepages-2Mi"${NOT}`,
      `container "sandbox": resources.claims${NOT}`,
      `resourceClaims "gpu"${NOT}`,
    ]);
    expect(unsafePodSpec(spec, { proxied: false, allow: ["resourceClaims", "resources"], resourceKeys: ["nvidia.com/gpu", "hugepages-2Mi"] })).toEqual([`the pod: resources "hugepages-1Gi"${NOT}`, `container "warm": resources "example.com/fpga"${NOT}`]);
    expect(unsafePodSpec(spec, { proxied: false, allow: ["resourceClaims", "resources"], resourceKeys: ["nvidia.com/gpu", "hugepages-2Mi", "hugepages-1Gi", "example.com/fpga"] })).toEqual([]);
  });

  it("pod-level cpu and memory requests (k8s 1.32+), which the scheduler reserves and the quota does not count, and a stated overhead are refused unless pod-policy allows them (review 27 M2, L5)", () => {
    const spec: V1PodSpec = { resources: { requests: { cpu: "64", memory: "256Gi" } }, overhead: { cpu: "8" }, containers: [{ name: "sandbox", image: "x", resources: { limits: { cpu: "1", memory: "1Gi" } } }] };
    const NOT = ": the quota does not count it (the injection config's pod-policy does not allow it)";
    expect(unsafePodSpec(spec, { proxied: false })).toEqual([`resources (pod-level)${NOT}`, `overhead${NOT}`]);
    expect(unsafePodSpec(spec, { proxied: false, allow: ["resources"] })).toEqual([`overhead${NOT}`]);
    expect(unsafePodSpec(spec, { proxied: false, allow: ["resources", "overhead"] })).toEqual([]);
    // Empty ones ask for nothing.
    expect(unsafePodSpec({ ...spec, resources: { requests: {} }, overhead: {} }, { proxied: false })).toEqual([]);
  });

  it("--cluster-cidrs takes IPv4 blocks only", () => {
    expect(clusterCidrsFlag(undefined)).toBeUndefined();
    expect(clusterCidrsFlag("10.244.0.0/16, 10.96.0.0/12")).toEqual(["10.244.0.0/16", "10.96.0.0/12"]);
    expect(() => clusterCidrsFlag("10.0.0.0/8,fd00::/8")).toThrow(/fd00::\/8/);
  });

  it("--cluster-dns names the cluster DNS's pods or an address", () => {
    expect(clusterDnsFlag(undefined)).toBeUndefined();
    expect(clusterDnsFlag("kube-system/k8s-app=kube-dns")).toEqual({ namespace: "kube-system", podLabels: { "k8s-app": "kube-dns" } });
    expect(clusterDnsFlag("dns/app=coredns, tier=node")).toEqual({ namespace: "dns", podLabels: { app: "coredns", tier: "node" } });
    expect(clusterDnsFlag("169.254.20.10/32")).toEqual({ cidr: "169.254.20.10/32" });
    expect(() => clusterDnsFlag("kube-system")).toThrow(/--cluster-dns/);
    expect(() => clusterDnsFlag("Kube_System/a=b")).toThrow(/--cluster-dns/);
  });
});
