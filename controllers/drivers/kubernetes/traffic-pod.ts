// Pure: what a governed sandbox pod gets so that every connection of it goes through its own
// traffic-proxy (README.md, "Egress on Kubernetes"):
//   - init container `traffic-redirect` (NET_ADMIN, exits): nftables in the pod's network namespace
//     mark every TCP packet not sent by the proxy and not to the pod itself; policy routing sends
//     marked packets to `lo`, where TPROXY hands them to the proxy's transparent listener, so the
//     accepted socket's local address is where the sandbox was going (Node cannot getsockopt
//     SO_ORIGINAL_DST; with TPROXY it needs nothing but `localAddress`). DNS over UDP is
//     redirected to the proxy's resolver; any other packet out is dropped. "Sent by the proxy" is
//     the `proxy` chain, empty (nothing exempt) until the sidecar's launcher fills it with its own
//     container's cgroup and uid 1337 together: a uid alone is what any root process of the pod
//     (the agent-runtime runs commands as root, with SETUID) could take.
//   - sidecar `traffic-proxy`: `transparent.pl` opens the IP_TRANSPARENT listener as root with
//     NET_ADMIN, writes the `proxy` chain, sets gid 1337 and execs the Node proxy with the socket
//     as fd 3; Node sets uid 1337 itself (`--uid`) before it reads anything, which empties its
//     capabilities and, being a credential change in a running process, makes it non-dumpable:
//     no process of the pod (whose process namespace is shared) can ptrace it, read its memory or
//     take its sockets, whatever uid it takes. The proxy reads its policy from the pod's ConfigMap
//     and Secret, both mounted here only.
//   - ConfigMap `<pod>-traffic`: `policy.json`, the L4 half (schema/protocol/pod-traffic.ts);
//     Secret `<pod>-traffic`: `l7.json`, the L7 half (profiles may hold literal header values),
//     with the pod's CA and the secret values. Both written by the agent.
//   - NetworkPolicy `<pod>-egress`: the L3 backstop (DNS, and the internet without the cluster's
//     ranges except what an allow rule names), enforced by the cluster's CNI, not by us.
// A template that asks for what would let a process undo the rules, reach into the proxy or send
// around them (host namespaces, hostPath, privileged, capabilities beyond ALLOWED_ADD, unsafe
// sysctls, an unmasked /proc, a container or volume named as ours) is refused (unsafePodSpec):
// nothing of a tenant's spec is dropped silently. The same judge, less the proxy's reserved names,
// is every sandbox pod's, governed or not (review 25 H4): the agent creates pods with its own
// rights from a template anyone who may write a SandboxSet or a Sandbox chose. The nft script holds our constants only, and
// reaches nft as an argument (data), never as shell text.
import type { V1ConfigMap, V1Container, V1NetworkPolicy, V1NetworkPolicyPeer, V1OwnerReference, V1PodSpec, V1Secret } from "@kubernetes/client-node";
import { tokenSecretNames, type SecurityProfileEntry } from "../../../schema/api/security-profile.ts";
import { selectorLabels, selectsSandbox, type TrafficPolicyEntry } from "../../../schema/api/traffic-policy.ts";
import { cidrWithin, formatIp, parseCidr, PRIVATE_RANGES } from "../../../schema/egress/address.ts";
import { ALLOWED_RESOURCES, OPERATOR_FIELDS, type InjectionComponent } from "../../../schema/crd/injection.ts";
import type { EgressPolicy } from "../../../schema/protocol/egress.ts";
import type { PodTrafficL7, PodTrafficPolicy } from "../../../schema/protocol/pod-traffic.ts";
import { TerminalError, type DesiredSandbox } from "../driver.ts";
import { ReadyReason } from "../../../schema/crd/conditions.ts";
import { toL4, type TrafficPolicySet } from "../../traffic/governed.ts";
import { applicable } from "../../traffic/l4.ts";
import { L7_FILE, SECRETS_FILE } from "../../traffic/pod-l7.ts";
import { AUDIT_TOKEN_FILE } from "../../../schema/protocol/pod-audit.ts";
import { e2bRules, referencedSecrets } from "../../traffic/l7/policy.ts";

export const TRAFFIC_CONTAINER = "traffic-proxy";
export const REDIRECT_CONTAINER = "traffic-redirect";
/** The proxy's uid: the only one whose packets leave the pod as they are. */
export const PROXY_UID = 1337;
/** The TPROXY listener (every TCP connection out) and the DNS socket (UDP 53 out). */
export const TRANSPARENT_PORT = 15001;
export const DNS_PORT = 15053;
/** The explicit proxy port, for clients that honour HTTP_PROXY (loopback, so not redirected). */
export const EXPLICIT_PORT = 3128;
/** The kubelet's probes (`GET /ready`; the pod address, as Istio's 15021). */
export const HEALTH_PORT = 15021;
/** The suffix of a pod's runtime-token Secret (runtime-token.ts): the platform's, like `-traffic`. */
export const RUNTIME_SECRET_SUFFIX = "-runtime";
const MARK = "0x1e7a";
/** The regular chain of both tables that says which sockets are the proxy's (transparent.pl's name). */
const EXEMPT_CHAIN = "proxy";
const ROUTE_TABLE = 133;
/** Where the sidecar finds the pod's ConfigMap, and the image's root (k8s/Dockerfile's WORKDIR). */
export const POLICY_DIR = "/etc/sandbox-traffic";
export const POLICY_FILE = "policy.json";
export const APP_ROOT = "/app";
const VOLUME = "sandbox-traffic";
/** The pod's Secret (named as its ConfigMap): its own CA (`ca.crt`, `ca.key`, made by the agent for
 * this pod only) and `secrets.json` (the values its rules name), mounted into the sidecar only. */
export const SECRET_DIR = "/etc/sandbox-traffic-secret";
const SECRET_VOLUME = "sandbox-traffic-secret";
/** The CA's certificate reaches the tenant's containers as files in an emptyDir the `traffic-ca`
 * init container fills (the image's system roots plus the pod's CA), read-only for them: the
 * Secret itself is mounted into that init container with its `ca.crt` item only. */
export const CA_CONTAINER = "traffic-ca";
export const CA_DIR = "/run/kruise";
const CA_VOLUME = "sandbox-ca";
const CA_SOURCE_VOLUME = "sandbox-ca-source";
const CA_SOURCE_DIR = "/etc/sandbox-ca-source";
/** Fixed text: the image's bundle and the pod's CA, for clients that replace the system store. */
export const CA_SCRIPT = `umask 022
cp ${CA_SOURCE_DIR}/ca.crt ${CA_DIR}/ca.crt
{ cat /etc/ssl/certs/ca-certificates.crt 2>/dev/null || true; cat ${CA_SOURCE_DIR}/ca.crt; } > ${CA_DIR}/ca-bundle.crt
`;
/** What points TLS clients at the bundle (curl, OpenSSL, Python requests, Node), as on the local
 * driver (egress-l7.ts caEnv). */
export const CA_ENV = [
  { name: "SSL_CERT_FILE", value: `${CA_DIR}/ca-bundle.crt` },
  { name: "CURL_CA_BUNDLE", value: `${CA_DIR}/ca-bundle.crt` },
  { name: "REQUESTS_CA_BUNDLE", value: `${CA_DIR}/ca-bundle.crt` },
  { name: "NODE_EXTRA_CA_CERTS", value: `${CA_DIR}/ca.crt` },
];

/** Ranges the backstop keeps a governed pod from, unless a rule allows a block inside them: the
 * pod and service networks, nodes and VPC neighbours (private and shared space) and link-local
 * (cloud metadata). The agent's `--cluster-cidrs` replaces it. */
export const DEFAULT_CLUSTER_CIDRS = [...PRIVATE_RANGES.filter((r) => !r.includes(":")), "169.254.0.0/16"];

/** E2B's rules as a pod enforces them: `allowInternetAccess: false` is `denyOut: 0.0.0.0/0`
 * (with allowOut an allow list, without it nothing at all). Null: E2B restricts nothing. */
export function podEgress(d: Pick<DesiredSandbox, "allowInternetAccess" | "egress">): EgressPolicy | null {
  const e = d.egress ?? null;
  if (d.allowInternetAccess) return e;
  return { allowOut: e?.allowOut ?? [], denyOut: [...(e?.denyOut ?? []), "0.0.0.0/0"] };
}

/** What the pod's proxy enforces, or null when nothing governs the sandbox (no E2B rules, no
 * TrafficPolicy and no SecurityProfile selecting it, no `network.rules`). Only the policies and
 * profiles that select it travel (profiles as the edge sent them: names of secrets, never their
 * values; but a profile's literal header values, so its half goes in the Secret: splitPodPolicy). */
export function podPolicy(
  set: TrafficPolicySet,
  d: Pick<DesiredSandbox, "allowInternetAccess" | "egress" | "labels" | "namespace" | "networkRules" | "pool">,
  team: string,
  profiles: readonly SecurityProfileEntry[] = [],
): PodTrafficPolicy | null {
  const egress = podEgress(d);
  // The platform's labels (template, team = this namespace) beside the tenant's: global policies
  // and profiles see only them (the proxy reads these same labels from policy.json and selects as here).
  const labels = selectorLabels(d.labels ?? {}, d.pool, team);
  const selecting = set.entries.filter((e) => (e.team === null || e.team === team) && applicable([toL4(e)], labels).length > 0);
  const securityProfiles = profiles.filter((p) => (p.team === null || p.team === team) && selectsSandbox(p.spec.selector, labels, p.team === null));
  const networkRules = d.networkRules ?? {};
  const l7 = securityProfiles.length > 0 || Object.keys(networkRules).length > 0;
  if (!egress && !selecting.length && !l7) return null;
  return { team, labels, egress, trafficPolicies: selecting, ...(securityProfiles.length ? { securityProfiles } : {}), ...(Object.keys(networkRules).length ? { networkRules } : {}) };
}

/** The secrets a pod's sidecar may need, lower-cased: those its team's profiles'
 * tokenTransformations and its `network.rules` name (a GlobalSecurityProfile names none). */
export function podSecretNames(policy: PodTrafficPolicy | null): string[] {
  if (!policy) return [];
  const fromProfiles = (policy.securityProfiles ?? []).filter((p) => p.team !== null).flatMap((p) => tokenSecretNames(p.spec));
  const fromRules = referencedSecrets({ http: e2bRules(policy.networkRules ?? {}), mcp: [] }).map((n) => n.toLowerCase());
  return [...new Set([...fromProfiles, ...fromRules])].sort();
}

/** The pod's policy in its two halves: the ConfigMap's (L4, nothing sensitive) and the Secret's
 * (profiles and network.rules: a literal header value of a profile is a credential). */
export function splitPodPolicy(policy: PodTrafficPolicy): { l4: PodTrafficPolicy; l7: PodTrafficL7 } {
  const { securityProfiles, networkRules, ...l4 } = policy;
  return { l4, l7: { ...(securityProfiles ? { securityProfiles } : {}), ...(networkRules ? { networkRules } : {}) } };
}

/** What one object (ConfigMap or Secret) may hold: etcd's 1.5 MiB request limit less room for the
 * object's metadata; kubectl and the API server refuse a ConfigMap's or Secret's data over 1 MiB. */
export const MAX_POD_OBJECT_BYTES = 1024 * 1024 - 16 * 1024;

/** Thrown (terminal for a new pod; an event for a running one, which keeps what it had) when a
 * pod's policy would not fit the object that carries it. */
export class PolicyTooLargeError extends TerminalError {}

/** Refuses an object's data (Secret data base64, as stored) over MAX_POD_OBJECT_BYTES, saying why. */
export function checkSize(id: string, kind: "ConfigMap" | "Secret", data: Record<string, string>): void {
  const bytes = Object.entries(data).reduce((n, [k, v]) => n + k.length + Buffer.byteLength(v), 0);
  if (bytes <= MAX_POD_OBJECT_BYTES) return;
  throw new PolicyTooLargeError(ReadyReason.InvalidSpec, `the traffic policy of sandbox ${id} takes ${bytes} bytes in its pod's ${kind}, over the ${MAX_POD_OBJECT_BYTES} one object may hold: fewer or smaller SecurityProfiles, TrafficPolicies or network.rules selecting it`);
}

/** The nftables ruleset the init container loads (constants only; README.md explains each chain). */
export function redirectRules(): string {
  const reset = (family: string) => `table ${family} sandbox_traffic {}\ndelete table ${family} sandbox_traffic\n`;
  const outOnly = `    jump ${EXEMPT_CHAIN}\n    ct direction reply accept\n    oifname "lo" accept\n`;
  // Filled by transparent.pl (its cgroup and uid: `accept`); empty, it exempts nothing.
  const exempt = `  chain ${EXEMPT_CHAIN} {\n  }\n`;
  // The hooks after mark_out still see the first route's device (eth0): the mark and the DNS
  // redirect's new address say where the packet really goes.
  const toProxy = `    meta l4proto tcp meta mark ${MARK} accept\n    ip daddr 127.0.0.0/8 accept\n`;
  return `${reset("ip")}${reset("ip6")}table ip sandbox_traffic {
${exempt}  chain mark_out {
    type route hook output priority mangle; policy accept;
    jump ${EXEMPT_CHAIN}
    ct direction reply return
    ip daddr 127.0.0.0/8 return
    fib daddr type local return
    meta l4proto tcp meta mark set ${MARK}
  }
  chain to_proxy {
    type filter hook prerouting priority mangle; policy accept;
    iifname "lo" meta l4proto tcp meta mark ${MARK} tproxy to 127.0.0.1:${TRANSPARENT_PORT}
  }
  chain dns_out {
    type nat hook output priority -100; policy accept;
    jump ${EXEMPT_CHAIN}
    udp dport 53 redirect to :${DNS_PORT}
  }
  chain only_proxy {
    type filter hook output priority filter; policy drop;
${outOnly}${toProxy}  }
}
table ip6 sandbox_traffic {
${exempt}  chain only_proxy {
    type filter hook output priority filter; policy drop;
${outOnly}  }
}
`;
}

/** The init container's shell: fixed text; the ruleset comes as its first argument ($1). Safe to
 * run again (a restarted pod keeps its network namespace): the tables are replaced, the rule and
 * route are not doubled. */
export const REDIRECT_SCRIPT = `printf '%s' "$1" | nft -f -
while ip rule del fwmark ${MARK} lookup ${ROUTE_TABLE} 2>/dev/null; do :; done
ip rule add fwmark ${MARK} lookup ${ROUTE_TABLE}
ip route replace local 0.0.0.0/0 dev lo table ${ROUTE_TABLE}
`;

/** The capabilities a tenant container may add: Pod Security "baseline"'s list (the container
 * runtimes' default set). Anything else (ALL, NET_ADMIN, NET_RAW, SYS_ADMIN, SYS_PTRACE, BPF,
 * SYS_MODULE, SYS_RAWIO, DAC_READ_SEARCH, PERFMON, ...) reaches the node's kernel beyond what a
 * sandbox needs, and in a governed pod would let a process undo the rules, reach into the proxy
 * or send around it. */
const ALLOWED_ADD = new Set([
  "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
  "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
]);
/** Dropped explicitly too, for runtimes whose default set holds them (NET_RAW in older ones). */
const DROP = ["NET_ADMIN", "NET_RAW", "SYS_ADMIN", "SYS_PTRACE", "BPF"];
/** The platform's container and volume names in a pod with the proxy. */
export const RESERVED_CONTAINERS: readonly string[] = [TRAFFIC_CONTAINER, REDIRECT_CONTAINER, CA_CONTAINER];
export const RESERVED_VOLUMES: readonly string[] = [VOLUME, SECRET_VOLUME, CA_VOLUME, CA_SOURCE_VOLUME];
/** The sysctls a governed pod may set: the Pod Security Standards' "safe" set (baseline). The
 * others under net.* change how the pod's network namespace routes and filters (route_localnet,
 * forwarding, rp_filter, ...), where the redirect lives. */
const SAFE_SYSCTLS = new Set([
  "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
  "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
  "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes",
]);

/** SELinux types a container may ask for (Pod Security "baseline"); user and role may not be set. */
const SELINUX_TYPES = new Set(["", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"]);
/** The pre-1.30 annotation forms of the AppArmor and seccomp profiles (the API server still copies
 * the AppArmor one into the container's field at create). */
const APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/";
const SECCOMP_ANNOTATIONS = ["seccomp.security.alpha.kubernetes.io/pod", "container.seccomp.security.alpha.kubernetes.io/"];

/** The API server's default `schedulerName`: a template stating it asks for nothing. */
const DEFAULT_SCHEDULER = "default-scheduler";

/** Resources a template asks for that the quota does not count (review 26 M7), one line each:
 * a requests or limits key other than ALLOWED_RESOURCES (extended resources such as
 * `nvidia.com/gpu`, `hugepages-*`: node memory outside `memory`) not in `pod-policy.resourceKeys`,
 * in any container or the pod-level `resources`; pod-level `resources` and `overhead` at all
 * unless `allow` names them; and dynamic resource allocation (the pod's
 * `resourceClaims`, a container's `resources.claims`) unless `allow` names `resourceClaims`. */
export function resourceProblems(spec: V1PodSpec, policy: { allow?: readonly string[]; resourceKeys?: readonly string[] }): string[] {
  const out: string[] = [];
  const keys = new Set<string>([...ALLOWED_RESOURCES, ...(policy.resourceKeys ?? [])]);
  const claims = policy.allow?.includes("resourceClaims") ?? false;
  const NOT = "the quota does not count it (the injection config's pod-policy does not allow it)";
  const judge = (at: string, r: V1PodSpec["resources"]) => {
    const named = new Set([...Object.keys(r?.requests ?? {}), ...Object.keys(r?.limits ?? {})]);
    for (const k of named) if (!keys.has(k)) out.push(`${at}: resources ${JSON.stringify(k)}: ${NOT}`);
    if (!claims && r?.claims?.length) out.push(`${at}: resources.claims: ${NOT}`);
  };
  judge("the pod", spec.resources);
  // Pod-level requests (k8s 1.32+ PodLevelResources) are what the scheduler reserves, above the
  // containers' sum when larger, and podCost counts containers only; `overhead` is the
  // RuntimeClass admission plugin's to fill in after this judge, so a template never needs it
  // (review 27 M2, L5). Both only where `allow` names them.
  const stated = (r: { requests?: object; limits?: object } | undefined) => Object.keys(r?.requests ?? {}).length + Object.keys(r?.limits ?? {}).length > 0;
  if (stated(spec.resources) && !policy.allow?.includes("resources")) out.push(`resources (pod-level): ${NOT}`);
  if (Object.keys(spec.overhead ?? {}).length && !policy.allow?.includes("overhead")) out.push(`overhead: ${NOT}`);
  for (const c of [...(spec.initContainers ?? []), ...spec.containers]) judge(`container ${JSON.stringify(c.name)}`, c.resources);
  if (!claims && spec.resourceClaims?.length) out.push(`resourceClaims ${spec.resourceClaims.map((c) => JSON.stringify(c.name)).join(", ")}: ${NOT}`);
  return out;
}

/** Placement a template asks for beyond what the operator allows (review 25 M5), one line each:
 * tolerations and node selection (which nodes: the operator's dedicated or control-plane nodes)
 * key by key, and pod (anti-)affinity to other namespaces' pods (co-location with, or eviction
 * pressure on, another team's sandboxes). Pod (anti-)affinity to the pod's own namespace is the
 * tenant's (spreading its own sandboxes). */
export function placementProblems(spec: V1PodSpec, policy: { allow?: readonly string[]; tolerationKeys?: readonly string[]; nodeSelectorKeys?: readonly string[] }): string[] {
  const out: string[] = [];
  const allow = new Set(policy.allow ?? []);
  const tolerated = new Set(policy.tolerationKeys ?? []);
  const nodeKeys = new Set(policy.nodeSelectorKeys ?? []);
  const NOT = "the operator's to set (the injection config's pod-policy does not allow it)";
  if (!allow.has("tolerations")) {
    for (const t of spec.tolerations ?? []) if (!t.key || !tolerated.has(t.key)) out.push(`tolerations ${JSON.stringify(t.key ? t.key : "(every taint)")}: ${NOT}`);
  }
  if (!allow.has("nodeSelector")) {
    for (const k of Object.keys(spec.nodeSelector ?? {})) if (!nodeKeys.has(k)) out.push(`nodeSelector ${JSON.stringify(k)}: ${NOT}`);
  }
  if (!allow.has("affinity")) {
    const node = spec.affinity?.nodeAffinity;
    const terms = [...(node?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms ?? []), ...(node?.preferredDuringSchedulingIgnoredDuringExecution ?? []).map((p) => p.preference)];
    const keys = new Set<string>();
    for (const t of terms) {
      for (const e of t?.matchExpressions ?? []) if (!nodeKeys.has(e.key)) keys.add(e.key);
      // matchFields name nodes themselves (metadata.name): nodeName by another route.
      for (const e of t?.matchFields ?? []) keys.add(`field ${e.key}`);
    }
    for (const k of keys) out.push(`affinity.nodeAffinity ${JSON.stringify(k)}: ${NOT}`);
    for (const kind of ["podAffinity", "podAntiAffinity"] as const) {
      const a = spec.affinity?.[kind];
      const podTerms = [...(a?.requiredDuringSchedulingIgnoredDuringExecution ?? []), ...(a?.preferredDuringSchedulingIgnoredDuringExecution ?? []).map((p) => p.podAffinityTerm)];
      if (podTerms.some((t) => t && (t.namespaceSelector || (t.namespaces?.length ?? 0) > 0))) out.push(`affinity.${kind} to other namespaces' pods (namespaces or a namespaceSelector): ${NOT}`);
    }
  }
  return out;
}

/** What unsafePodSpec judges a pod by, beside its spec. */
export interface PodJudgement {
  /** The pod gets the traffic-proxy pair: its container and volume names and the CA directory
   * are reserved. */
  proxied: boolean;
  /** The injection config's `pod-policy.allow`: operator fields (nodeName, ...) a template may set. */
  allow?: readonly string[];
  /** The injection config's `pod-policy.tolerationKeys` and `nodeSelectorKeys`. */
  tolerationKeys?: readonly string[];
  nodeSelectorKeys?: readonly string[];
  /** The injection config's `pod-policy.resourceKeys`: extended resources a template may name. */
  resourceKeys?: readonly string[];
  /** The template's pod annotations (the AppArmor and seccomp annotation forms). */
  annotations?: Record<string, string>;
  /** The template's claims, made into PVCs as the agent (review 25 L4). */
  volumeClaimTemplates?: readonly { metadata: { name: string }; spec?: Record<string, unknown> }[];
}

/** Thrown (terminal) when a template asks for what the traffic-proxy cannot govern. */
export class UnsafePodSpecError extends TerminalError {}

/**
 * What in a template would let a sandbox pod's processes reach past the pod (the node, the
 * platform's Secrets, other teams' placement), and in a governed pod escape or undo its redirect,
 * one line each (empty: none). Every pod the agent makes is judged, governed or not: the agent
 * creates it with its own rights from a template that anyone who may write a SandboxSet or a
 * Sandbox's `spec.template` chose, and team namespaces may be labelled PodSecurity `privileged`
 * (README), so admission is no backstop. The line is Pod Security "baseline" (host namespaces and
 * ports, hostPath, privileged, capabilities, procMount, sysctls, SELinux, AppArmor and seccomp
 * `Unconfined`) plus what is the platform's: the `*-traffic` Secrets (CA key, secret values,
 * profile literals, audit token), a service account's token, the operator's placement fields
 * (OPERATOR_FIELDS: nodeName, priorityClassName, runtimeClassName, a scheduler other than the
 * default) and placement: tolerations, node selection, pod affinity to other namespaces,
 * resources the quota does not count (extended resources, resource claims) (`allow` and the
 * allowed keys lift these), and PVCs bound to a chosen PV or filled from another namespace. The
 * template is the tenant's; the injection config's components (the platform's) are not judged
 * here. Running as root is not refused: what nft and the proxy need is capabilities
 * (CAP_NET_ADMIN in the pod's network namespace, CAP_SYS_PTRACE), which the bounding set of a
 * container without them withholds from root and from setuid programs alike
 * (allowPrivilegeEscalation cannot add to it).
 */
export function unsafePodSpec(spec: V1PodSpec, j: PodJudgement = { proxied: true }): string[] {
  const out: string[] = [];
  const reservedContainer = (name: string) => j.proxied && RESERVED_CONTAINERS.includes(name);
  const reservedVolume = (name: string) => j.proxied && RESERVED_VOLUMES.includes(name);
  if (spec.hostNetwork) out.push("hostNetwork: the pod would use the node's network, outside its own network namespace (and any redirect there)");
  if (spec.hostPID) out.push("hostPID: the node's processes (and their network namespaces) would be in reach");
  if (spec.hostIPC) out.push("hostIPC: the node's IPC namespace would be shared");
  for (const s of spec.securityContext?.sysctls ?? []) if (!SAFE_SYSCTLS.has(s.name)) out.push(`securityContext.sysctls ${JSON.stringify(s.name)}: only the Pod Security Standards' safe sysctls may be set`);
  out.push(...unconfined("securityContext", spec.securityContext));
  for (const f of OPERATOR_FIELDS) if (spec[f] && !(f === "schedulerName" && spec[f] === DEFAULT_SCHEDULER) && !j.allow?.includes(f)) out.push(`${f} ${JSON.stringify(spec[f])}: the operator's to set (the injection config's pod-policy does not allow it)`);
  out.push(...placementProblems(spec, j));
  out.push(...resourceProblems(spec, j));
  const sa = spec.serviceAccountName || spec.serviceAccount;
  if (sa && sa !== "default") {
    if (spec.automountServiceAccountToken) out.push(`serviceAccountName ${JSON.stringify(sa)} with automountServiceAccountToken: the pod would hold that service account's token, created with the agent's rights`);
    for (const v of spec.volumes ?? []) if (v.projected?.sources?.some((x) => x.serviceAccountToken)) out.push(`volume ${JSON.stringify(v.name)}: a serviceAccountToken of ${JSON.stringify(sa)}`);
  }
  for (const v of spec.volumes ?? []) {
    if (reservedVolume(v.name)) out.push(`volume ${JSON.stringify(v.name)}: the name is the traffic-proxy's`);
    if (v.hostPath) out.push(`volume ${JSON.stringify(v.name)}: hostPath ${JSON.stringify(v.hostPath.path)} reaches the node's files (its sockets, /proc, /sys)`);
    const secrets = [v.secret?.secretName, ...(v.projected?.sources ?? []).map((x) => x.secret?.name)];
    for (const name of secrets) if (name && isPlatformSecret(name)) out.push(`volume ${JSON.stringify(v.name)}: Secret ${JSON.stringify(name)} is the platform's (a pod's traffic or runtime-token Secret)`);
  }
  const all = [...(spec.initContainers ?? []).map((c) => ["initContainers", c] as const), ...spec.containers.map((c) => ["containers", c] as const), ...(spec.ephemeralContainers ?? []).map((c) => ["ephemeralContainers", c as V1Container] as const)];
  for (const [list, c] of all) {
    const at = `${list} ${JSON.stringify(c.name)}`;
    if (reservedContainer(c.name)) out.push(`${at}: the name is the traffic-proxy's`);
    const sc = c.securityContext;
    if (sc?.privileged) out.push(`${at}: privileged`);
    const extra = (sc?.capabilities?.add ?? []).filter((x) => !ALLOWED_ADD.has(x.toUpperCase().replace(/^CAP_/, "")));
    if (extra.length) out.push(`${at}: capabilities.add ${extra.join(", ")} (allowed: ${[...ALLOWED_ADD].join(", ")})`);
    if (sc?.procMount && sc.procMount !== "Default") out.push(`${at}: procMount ${sc.procMount}`);
    out.push(...unconfined(at, sc));
    for (const p of c.ports ?? []) if (p.hostPort) out.push(`${at}: hostPort ${p.hostPort} opens a port of the node`);
    for (const e of c.env ?? []) {
      const name = e.valueFrom?.secretKeyRef?.name;
      if (name && isPlatformSecret(name)) out.push(`${at}: env ${JSON.stringify(e.name)} reads Secret ${JSON.stringify(name)}, the platform's`);
    }
    for (const e of c.envFrom ?? []) if (e.secretRef?.name && isPlatformSecret(e.secretRef.name)) out.push(`${at}: envFrom Secret ${JSON.stringify(e.secretRef.name)}, the platform's`);
    for (const m of c.volumeMounts ?? []) {
      if (reservedVolume(m.name)) out.push(`${at}: mounts ${JSON.stringify(m.name)}, the traffic-proxy's volume`);
      else if (j.proxied && (m.mountPath === CA_DIR || m.mountPath.startsWith(`${CA_DIR}/`))) out.push(`${at}: mounts a volume at ${CA_DIR}, where the pod's CA bundle goes`);
    }
  }
  for (const [k, v] of Object.entries(j.annotations ?? {})) {
    if ((k.startsWith(APPARMOR_ANNOTATION) && v === "unconfined") || (SECCOMP_ANNOTATIONS.some((a) => k === a || (a.endsWith("/") && k.startsWith(a))) && v === "unconfined")) out.push(`annotation ${JSON.stringify(k)}: unconfined`);
  }
  for (const vct of j.volumeClaimTemplates ?? []) {
    const at = `volumeClaimTemplates ${JSON.stringify(vct.metadata.name)}`;
    const pvc = (vct.spec ?? {}) as { volumeName?: unknown; dataSourceRef?: { namespace?: unknown } };
    if (pvc.volumeName) out.push(`${at}: volumeName binds a PersistentVolume by name, which may be another team's`);
    if (pvc.dataSourceRef?.namespace) out.push(`${at}: dataSourceRef from namespace ${JSON.stringify(pvc.dataSourceRef.namespace)}: only the sandbox's own namespace`);
  }
  return out;
}

/** The pod's or a container's securityContext asking for no seccomp filter, no AppArmor profile or
 * an SELinux label outside baseline's. */
function unconfined(at: string, sc: V1PodSpec["securityContext"] | V1Container["securityContext"] | undefined): string[] {
  const out: string[] = [];
  if (sc?.seccompProfile?.type === "Unconfined") out.push(`${at}: seccompProfile Unconfined`);
  if (sc?.appArmorProfile?.type === "Unconfined") out.push(`${at}: appArmorProfile Unconfined`);
  const se = sc?.seLinuxOptions;
  if (se && (!SELINUX_TYPES.has(se.type ?? "") || se.user || se.role)) out.push(`${at}: seLinuxOptions ${JSON.stringify(se)} (baseline allows a type of ${[...SELINUX_TYPES].filter(Boolean).join(", ")} only)`);
  return out;
}

/** A Secret the agent writes for a pod: `<pod>-traffic` (the CA key, the secret values, the
 * profiles' literals and the audit token), which no template may mount or read into env. */
function isPlatformSecret(name: string): boolean {
  // A pod's traffic Secret (CA key, secret values) or its runtime's token (another pod's warm member).
  return name.endsWith(TRAFFIC_SUFFIX) || name.endsWith(RUNTIME_SECRET_SUFFIX);
}

/** Whether the cluster runs a pod's init container with `restartPolicy: Always` as a sidecar
 * (started in order, kept running): Kubernetes' native sidecars, on by default from 1.29 and GA in
 * 1.33. Judged from the API server's version, which cannot see the kubelets: a kubelet may be up
 * to three minors older (the version skew policy), and one that does not know the field would run
 * the proxy as an ordinary init container that never exits (the pod would never start). So only
 * from 1.33 on, whose kubelets are at least 1.30. `minor` as /version gives it ("33", "33+"). */
export function nativeSidecarsFor(version: { major?: string; minor?: string }): boolean {
  const major = Number.parseInt(version.major ?? "", 10);
  const minor = Number.parseInt(version.minor ?? "", 10);
  return major > 1 || (major === 1 && minor >= 33);
}

/** Adds the redirect and the proxy to a pod spec (mutated: the caller's copy) whose template
 * passed unsafePodSpec. The redirect and the CA init containers go first, so every init container
 * of the template already runs redirected. With `nativeSidecar` (nativeSidecarsFor) the proxy is
 * the third init container, with `restartPolicy: Always` and a startup probe: the kubelet starts
 * the template's init containers only once it answers, so their connections are governed as the
 * sandbox's are, and it keeps running beside the containers (and stops after them). Without, it
 * is a regular container: the template's init containers run with no proxy up, so no network out
 * at all. Every container keeps the drops of DROP and loses `privileged` (the injection config's
 * components too: they run beside the tenant's code); the pod loses the host's namespaces.
 * `configMap`: the pod's policy ConfigMap. */
export function injectTraffic(spec: V1PodSpec, component: InjectionComponent, configMap: string, nativeSidecar = false): void {
  const image = component.image!;
  spec.hostNetwork = false;
  spec.hostPID = false;
  spec.hostIPC = false;
  spec.initContainers ??= [];
  for (const c of [...spec.containers, ...spec.initContainers]) {
    const sc = (c.securityContext ??= {});
    sc.privileged = false;
    const caps = (sc.capabilities ??= {});
    if (caps.add) caps.add = caps.add.filter((x) => ALLOWED_ADD.has(x.toUpperCase().replace(/^CAP_/, "")));
    caps.drop = [...new Set([...(caps.drop ?? []), ...DROP])];
  }
  const root = { runAsUser: 0, runAsGroup: 0, runAsNonRoot: false, allowPrivilegeEscalation: false, readOnlyRootFilesystem: true };
  const redirect: V1Container = {
    name: REDIRECT_CONTAINER,
    image,
    command: ["/bin/sh", "-ec", REDIRECT_SCRIPT, REDIRECT_CONTAINER, redirectRules()],
    securityContext: { ...root, capabilities: { drop: ["ALL"], add: ["NET_ADMIN"] } },
  };
  const ca: V1Container = {
    name: CA_CONTAINER,
    image,
    command: ["/bin/sh", "-ec", CA_SCRIPT],
    volumeMounts: [
      { name: CA_SOURCE_VOLUME, mountPath: CA_SOURCE_DIR, readOnly: true },
      { name: CA_VOLUME, mountPath: CA_DIR },
    ],
    securityContext: { runAsUser: 65534, runAsGroup: 65534, runAsNonRoot: true, allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ["ALL"] } },
  };
  // The tenant's containers trust the pod's CA (read-only files; the key is not among them). Its
  // init containers too: they run after traffic-ca has written the bundle, and (as a native
  // sidecar) through the proxy, which terminates TLS with that CA for the hosts an HTTP rule names.
  for (const c of [...spec.containers, ...spec.initContainers]) {
    c.volumeMounts = [...(c.volumeMounts ?? []).filter((m) => m.mountPath !== CA_DIR && m.name !== CA_VOLUME), { name: CA_VOLUME, mountPath: CA_DIR, readOnly: true }];
    c.env = [...(c.env ?? []).filter((e) => !CA_ENV.some((x) => x.name === e.name)), ...CA_ENV];
  }
  const proxy: V1Container = {
    name: TRAFFIC_CONTAINER,
    image,
    command: proxyCommand(),
    ...(component.env ? { env: structuredClone(component.env) } : {}),
    ...(component.resources ? { resources: structuredClone(component.resources) as V1Container["resources"] } : {}),
    volumeMounts: [
      { name: VOLUME, mountPath: POLICY_DIR, readOnly: true },
      { name: SECRET_VOLUME, mountPath: SECRET_DIR, readOnly: true },
    ],
    ports: [{ name: "proxy-health", containerPort: HEALTH_PORT }],
    readinessProbe: { httpGet: { path: "/ready", port: HEALTH_PORT }, periodSeconds: 1 },
    livenessProbe: { httpGet: { path: "/ready", port: HEALTH_PORT }, periodSeconds: 10, timeoutSeconds: 2, failureThreshold: 3 },
    // Root only until transparent.pl has its socket and its exemption, and Node its uid: then
    // uid 1337, no capabilities, no new ones.
    securityContext: { ...root, capabilities: { drop: ["ALL"], add: ["NET_ADMIN", "SETUID", "SETGID"] } },
  };
  if (nativeSidecar) {
    // The next init container starts once this probe passes (every listener up): not before.
    proxy.restartPolicy = "Always";
    proxy.startupProbe = { httpGet: { path: "/ready", port: HEALTH_PORT }, periodSeconds: 1, failureThreshold: 120 };
    spec.initContainers = [redirect, ca, proxy, ...spec.initContainers];
  } else {
    spec.initContainers = [redirect, ca, ...spec.initContainers];
    spec.containers = [...spec.containers, proxy];
  }
  spec.volumes = [
    ...(spec.volumes ?? []),
    { name: VOLUME, configMap: { name: configMap } },
    // Only the sidecar mounts it, so its files may be world-readable: the proxy reads them as uid
    // 1337 after giving up root (no fsGroup, which would reach the tenant's volumes too).
    { name: SECRET_VOLUME, secret: { secretName: configMap, defaultMode: 0o444 } },
    { name: CA_SOURCE_VOLUME, secret: { secretName: configMap, items: [{ key: "ca.crt", path: "ca.crt" }], defaultMode: 0o444 } },
    { name: CA_VOLUME, emptyDir: { medium: "Memory", sizeLimit: "4Mi" } },
  ];
}

/** The sidecar's argv (the image's paths; the netns test maps APP_ROOT onto the repository). */
export function proxyCommand(): string[] {
  return [
    "perl", `${APP_ROOT}/controllers/traffic/transparent.pl`, "127.0.0.1", String(TRANSPARENT_PORT), String(PROXY_UID), "--",
    "node", `${APP_ROOT}/controllers/traffic/main.ts`, "--uid", String(PROXY_UID), "--listen", `127.0.0.1:${EXPLICIT_PORT}`, "--transparent-fd", "3",
    "--dns", `127.0.0.1:${DNS_PORT}`, "--pod-policy", `${POLICY_DIR}/${POLICY_FILE}`, "--secret-dir", SECRET_DIR, "--health", `0.0.0.0:${HEALTH_PORT}`,
  ];
}

/** Object names beside the pod's (names may be 253 long; the suffix must fit). */
const TRAFFIC_SUFFIX = "-traffic";
/** The pod's policy ConfigMap and its Secret (same name). */
export const trafficConfigMapName = (pod: string) => `${pod.slice(0, 244)}${TRAFFIC_SUFFIX}`;
export const egressPolicyName = (pod: string) => `${pod.slice(0, 245)}-egress`;

interface Owned {
  pod: string;
  namespace: string;
  labels: Record<string, string>;
  owner: V1OwnerReference;
}

export function trafficConfigMap(o: Owned, policy: PodTrafficPolicy): V1ConfigMap {
  return {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { name: trafficConfigMapName(o.pod), namespace: o.namespace, labels: o.labels, ownerReferences: [o.owner] },
    data: { [POLICY_FILE]: JSON.stringify(splitPodPolicy(policy).l4) },
  };
}

/** The pod's Secret (same name as its ConfigMap; README.md "L7 in pods"): `ca.crt`/`ca.key`, the
 * pod's own CA, `secrets.json`, the values the sidecar adds to requests, `l7.json`, the
 * policy's L7 half (splitPodPolicy), and `audit.token`, what the agent shows the sidecar to pull
 * its audit records (pod-audit.ts). */
export function trafficSecret(o: Owned, ca: { cert: string; key: string }, secrets: Record<string, string>, l7: PodTrafficL7, auditToken: string): V1Secret {
  const b64 = (t: string) => Buffer.from(t).toString("base64");
  return {
    apiVersion: "v1",
    kind: "Secret",
    type: "Opaque",
    metadata: { name: trafficConfigMapName(o.pod), namespace: o.namespace, labels: o.labels, ownerReferences: [o.owner] },
    data: { "ca.crt": b64(ca.cert), "ca.key": b64(ca.key), [SECRETS_FILE]: b64(JSON.stringify(secrets)), [L7_FILE]: b64(JSON.stringify(l7)), [AUDIT_TOKEN_FILE]: b64(auditToken) },
  };
}

/** The backstop's cluster side: the ranges a governed pod is kept from (`--cluster-cidrs`) and
 * where its DNS may go (`--cluster-dns`): the cluster DNS's pods, or an address (node-local DNS). */
export interface Backstop {
  clusterCidrs: string[];
  dns: { namespace: string; podLabels: Record<string, string> } | { cidr: string };
}

/** kube-dns / CoreDNS as kubeadm, kind and the managed clusters label it. */
export const DEFAULT_CLUSTER_DNS: Backstop["dns"] = { namespace: "kube-system", podLabels: { "k8s-app": "kube-dns" } };

/** The IPv4 blocks inside the cluster's ranges that the platform's GlobalTrafficPolicies allow:
 * the backstop lets those through. A tenant's own rules (E2B `allowOut`, a team's TrafficPolicy)
 * never open it: the cluster's ranges are the platform's to give (its proxy still enforces them). */
export function allowedInside(policy: PodTrafficPolicy, clusterCidrs: string[]): string[] {
  const ranges = clusterCidrs.map((c) => parseCidr(c)).filter((c) => c !== undefined);
  const texts = policy.trafficPolicies
    .filter((e: TrafficPolicyEntry) => e.team === null)
    .flatMap((e) => e.spec.egress.rules.filter((r) => r.action === "allow").flatMap((r) => r.to.flatMap((p) => ("cidr" in p ? [p.cidr] : []))));
  const out = new Set<string>();
  for (const t of texts) {
    const c = parseCidr(t);
    if (!c || c.v6 || !ranges.some((r) => cidrWithin(c, r))) continue;
    out.add(`${formatIp({ v6: false, n: c.base << BigInt(32 - c.bits) })}/${c.bits}`);
  }
  return [...out].sort();
}

/** The per-pod backstop: DNS to the cluster DNS only, the IPv4 internet without the cluster's
 * ranges, and the blocks inside them a GlobalTrafficPolicy allows. Egress only: ingress (the edge
 * to the runtime) is untouched. */
export function egressNetworkPolicy(o: Owned & { selector: Record<string, string> }, policy: PodTrafficPolicy, backstop: Backstop): V1NetworkPolicy {
  const inside = allowedInside(policy, backstop.clusterCidrs);
  const d = backstop.dns;
  const dns: V1NetworkPolicyPeer = "cidr" in d ? { ipBlock: { cidr: d.cidr } } : { namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": d.namespace } }, podSelector: { matchLabels: d.podLabels } };
  return {
    apiVersion: "networking.k8s.io/v1",
    kind: "NetworkPolicy",
    metadata: { name: egressPolicyName(o.pod), namespace: o.namespace, labels: o.labels, ownerReferences: [o.owner] },
    spec: {
      podSelector: { matchLabels: o.selector },
      policyTypes: ["Egress"],
      egress: [
        { to: [dns], ports: [{ protocol: "UDP", port: 53 }, { protocol: "TCP", port: 53 }] },
        { to: [{ ipBlock: { cidr: "0.0.0.0/0", except: backstop.clusterCidrs } }, ...inside.map((cidr) => ({ ipBlock: { cidr } }))] },
      ],
    },
  };
}
