// User labels and annotations on a sandbox's cluster objects (the Sandbox and its Pod): E2B create
// metadata (`label:<k>` → label k; every other key that is a valid annotation key → annotation,
// as OpenKruise Agents writes E2B metadata as Sandbox annotations, §3.4) and a SandboxClaim's
// `labels` / `annotations` (§1.4). The API server refuses an object with one bad key or value, so
// the edge and the claim controller check them first, and the driver never writes one.

/** `agents.kruise.io/`, `e2b.agents.kruise.io/` and every other `*.agents.kruise.io/` prefix are
 * the system's (the driver's own keys live there): no user label or annotation may use them. */
const RESERVED = /^([^/]*\.)?agents\.kruise\.io\//;

const PREFIX = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const NAME = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;

/** Kubernetes' limit on the keys and values of all of an object's annotations together. */
export const K8S_ANNOTATION_BYTES = 256 * 1024;
/** What user annotations may take of it: the rest is for the system's own and the template's. */
export const USER_ANNOTATION_BYTES = 128 * 1024;

export function isReservedKey(key: string): boolean {
  return RESERVED.test(key);
}

/** DNS prefixes (and their subdomains) whose pod annotations or labels Kubernetes, the container
 * runtime, a CNI or a mesh acts on: `container.apparmor.security.beta.kubernetes.io/<c>:
 * unconfined` turns AppArmor off (the API server copies it into the container's profile since
 * 1.30), `k8s.v1.cni.cncf.io/networks` attaches another network (Multus), `sidecar.istio.io/*` and
 * `config.linkerd.io/*` change a mesh's proxy, and so on. Kubernetes reserves kubernetes.io and
 * k8s.io for its own components (kubernetes.io/docs/reference/labels-annotations-taints/). */
const PLATFORM_DOMAINS = ["kubernetes.io", "k8s.io", "cni.cncf.io", "multus-cni.io", "projectcalico.org", "cilium.io", "istio.io", "linkerd.io", "crio.io", "cri-o.io", "gvisor.dev", "katacontainers.io"];
/** Unprefixed dotted keys the runtimes read: CRI-O's `io.kubernetes.cri-o.*` (devices, user
 * namespace mode, cgroup settings) and containerd CRI's `io.kubernetes.cri.*`, Kata's
 * `io.katacontainers.*` (hypervisor and kernel options), `io.containers.*` (OCI hooks), crun's
 * `run.oci.*`, gVisor's `dev.gvisor.*`. */
const PLATFORM_KEY_PREFIXES = ["io.kubernetes.", "io.katacontainers.", "io.containers.", "io.containerd.", "run.oci.", "dev.gvisor."];

/** The platform prefix `key` is under (undefined: none): no user label or annotation may use it. */
export function platformPrefix(key: string): string | undefined {
  const k = key.toLowerCase();
  const slash = k.indexOf("/");
  if (slash >= 0) {
    const domain = k.slice(0, slash);
    const hit = PLATFORM_DOMAINS.find((d) => domain === d || domain.endsWith(`.${d}`));
    if (hit) return domain === hit ? `${hit}/` : `*.${hit}/`;
  }
  return PLATFORM_KEY_PREFIXES.find((p) => k.startsWith(p));
}

function reservedProblem(what: "label" | "annotation", key: string): string | undefined {
  if (isReservedKey(key)) return `${what} "${key}" uses a reserved prefix (agents.kruise.io)`;
  const platform = platformPrefix(key);
  if (platform) return `${what} "${key}" is under "${platform}", which Kubernetes, the container runtime or the network reads from a pod`;
  return undefined;
}

/** A label or annotation key: `[prefix/]name`, the prefix a DNS subdomain (≤ 253), the name ≤ 63. */
export function isQualifiedName(key: string): boolean {
  const slash = key.indexOf("/");
  const [prefix, name] = slash < 0 ? [undefined, key] : [key.slice(0, slash), key.slice(slash + 1)];
  if (prefix !== undefined && (prefix.length > 253 || !PREFIX.test(prefix))) return false;
  return name.length <= 63 && NAME.test(name);
}

/** A label value: empty, or ≤ 63 of `[A-Za-z0-9-_.]` starting and ending alphanumeric. */
export function isLabelValue(value: string): boolean {
  return value === "" || (value.length <= 63 && NAME.test(value));
}

/** Bytes the annotations take against the API server's limit (keys and values, UTF-8). */
export function annotationBytes(annotations: Record<string, string>): number {
  const enc = new TextEncoder();
  let n = 0;
  for (const [k, v] of Object.entries(annotations)) n += enc.encode(k).length + enc.encode(v).length;
  return n;
}

/** Why a user label cannot be written (undefined: it can). */
export function labelProblem(key: string, value: string): string | undefined {
  if (!isQualifiedName(key)) return `"${key}" is not a valid label name ([prefix/]name, name at most 63 of [A-Za-z0-9-_.])`;
  const reserved = reservedProblem("label", key);
  if (reserved) return reserved;
  if (!isLabelValue(value)) return `label "${key}": value "${value}" is not a valid label value (at most 63 of [A-Za-z0-9-_.], alphanumeric at both ends)`;
  return undefined;
}

/** Why a set of user annotations cannot be written (undefined: it can). */
export function annotationsProblem(annotations: Record<string, string>): string | undefined {
  for (const key of Object.keys(annotations)) {
    if (!isQualifiedName(key)) return `"${key}" is not a valid annotation key ([prefix/]name, name at most 63 of [A-Za-z0-9-_.])`;
    const reserved = reservedProblem("annotation", key);
    if (reserved) return reserved;
  }
  const bytes = annotationBytes(annotations);
  if (bytes > USER_ANNOTATION_BYTES) return `annotations take ${bytes} bytes, at most ${USER_ANNOTATION_BYTES}`;
  return undefined;
}

/** The labels of `labels` the driver may write: valid and not reserved (the rest is dropped, so
 * one bad entry cannot fail every write of the sandbox). */
export function userLabels(labels: Record<string, string> | undefined): Record<string, string> {
  return Object.fromEntries(Object.entries(labels ?? {}).filter(([k, v]) => labelProblem(k, v) === undefined));
}

/** The annotations of `annotations` the driver may write: valid keys, not reserved (ours or the
 * platform's: `platformPrefix`), within the budget. */
export function userAnnotations(annotations: Record<string, string> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  let budget = USER_ANNOTATION_BYTES;
  const enc = new TextEncoder();
  for (const [k, v] of Object.entries(annotations ?? {})) {
    if (!isQualifiedName(k) || isReservedKey(k) || platformPrefix(k)) continue;
    budget -= enc.encode(k).length + enc.encode(v).length;
    if (budget < 0) break;
    out[k] = v;
  }
  return out;
}
