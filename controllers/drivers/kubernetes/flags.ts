// The agent's command-line flags for the kubernetes driver. Kept apart from from-flags.ts so the
// agent can declare them without loading the Kubernetes client unless the driver is chosen.
export const KUBERNETES_FLAGS = {
  kubeconfig: { type: "string" },
  namespace: { type: "string", default: "default" },
  // More team namespaces to watch and sync (comma-separated), or every namespace (cluster-wide RBAC).
  "watch-namespaces": { type: "string" },
  "all-namespaces": { type: "boolean", default: false },
  "runtime-image": { type: "string", default: "ghcr.io/kruise-edge/sandbox-agent:0.1.0" },
  // The agent-runtime of code-interpreter templates' pods (images/code-interpreter/Containerfile).
  "interpreter-image": { type: "string", default: "ghcr.io/kruise-edge/sandbox-code-interpreter:0.1.0" },
  // Upstream's gates, `Name=true,Other=false`; known: Commit (default off).
  "feature-gates": { type: "string", default: "" },
  // The image the Commit controller's Jobs run (k8s/commit/commit.sh as its entrypoint).
  "commit-image": { type: "string", default: "ghcr.io/kruise-edge/sandbox-commit:0.1.0" },
  // What a governed pod's NetworkPolicy keeps it from (comma-separated IPv4 CIDRs: the cluster's
  // pod, service and node ranges); default: private and shared space and link-local.
  "cluster-cidrs": { type: "string" },
  // Where a governed pod's DNS may go past its NetworkPolicy: NAMESPACE/label=value[,label=value]
  // (the cluster DNS's pods; default kube-system/k8s-app=kube-dns) or an IPv4 block (node-local DNS).
  "cluster-dns": { type: "string" },
  // Opt-in: each pod's agent-runtime exports its spans to --otlp-endpoint (README.md, "Runtime
  // spans in pods"). Off by default even when the agent traces: the collector then takes writes
  // from every sandbox pod, tenants' code included.
  "pod-runtime-tracing": { type: "boolean", default: false },
  // The traffic-proxy as a native sidecar (the template's init containers governed): auto (from
  // the API server's version: 1.33 and later), on, off.
  "native-sidecars": { type: "string", default: "auto" },
} as const;

/** `--native-sidecars auto|on|off`: undefined for auto (the driver asks the API server). */
export function nativeSidecarsFlag(value: string | undefined): boolean | undefined {
  const v = (value ?? "auto").trim();
  if (v === "auto") return undefined;
  if (v === "on" || v === "off") return v === "on";
  throw new Error(`--native-sidecars: ${JSON.stringify(v)} is not auto, on or off`);
}

/** `--cluster-cidrs a/8,b/12`: each an IPv4 CIDR block (the NetworkPolicy's `except`). */
export function clusterCidrsFlag(value: string | undefined): string[] | undefined {
  const list = value?.split(",").map((c) => c.trim()).filter(Boolean);
  if (!list?.length) return undefined;
  for (const c of list) if (!/^\d{1,3}(\.\d{1,3}){3}\/\d{1,2}$/.test(c)) throw new Error(`--cluster-cidrs: ${JSON.stringify(c)} is not an IPv4 CIDR block`);
  return list;
}

const LABEL_PART = /^([A-Za-z0-9][-A-Za-z0-9_./]{0,252})=([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$/;

/** `--cluster-dns kube-system/k8s-app=kube-dns` or `--cluster-dns 169.254.20.10/32`. */
export function clusterDnsFlag(value: string | undefined): { namespace: string; podLabels: Record<string, string> } | { cidr: string } | undefined {
  const v = value?.trim();
  if (!v) return undefined;
  if (/^\d{1,3}(\.\d{1,3}){3}\/\d{1,2}$/.test(v)) return { cidr: v };
  const m = /^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)\/(.+)$/.exec(v);
  const parts = m?.[3]!.split(",").map((p) => LABEL_PART.exec(p.trim()));
  if (!m || !parts?.every((p) => p)) throw new Error(`--cluster-dns: ${JSON.stringify(v)} is neither NAMESPACE/label=value[,label=value] nor an IPv4 CIDR block`);
  return { namespace: m[1]!, podLabels: Object.fromEntries(parts.map((p) => [p![1]!, p![2]!])) };
}

const GATES = { Commit: false } as const;
export type FeatureGates = Record<keyof typeof GATES, boolean>;

/** `--feature-gates Commit=true`: the known gates with their defaults; an unknown gate or a value
 * other than true/false is an error (a typo would otherwise silently keep a feature off). */
export function featureGatesFlag(value: string | undefined): FeatureGates {
  const gates: FeatureGates = { ...GATES };
  for (const part of (value ?? "").split(",").map((p) => p.trim()).filter(Boolean)) {
    const m = /^([A-Za-z]+)=(true|false)$/.exec(part);
    if (!m || !(m[1]! in GATES)) throw new Error(`--feature-gates: ${JSON.stringify(part)} is not Name=true|false of ${Object.keys(GATES).join(", ")}`);
    gates[m[1] as keyof FeatureGates] = m[2] === "true";
  }
  return gates;
}

/** Whether pods' runtimes keep spans for the agent: only with the opt-in, which needs the agent's
 * own collector (the agent forwards them there). */
export function podTracingFlag(flags: { "otlp-endpoint"?: string; "pod-runtime-tracing"?: boolean }): boolean {
  if (!flags["pod-runtime-tracing"]) return false;
  if (!flags["otlp-endpoint"]) throw new Error("--pod-runtime-tracing needs --otlp-endpoint (the collector the agent forwards the pods' runtime spans to)");
  return true;
}

/** `--watch-namespaces a,b` / `--all-namespaces` as the driver's and the CRD link's option. */
export function watchNamespacesFlag(flags: { "watch-namespaces"?: string; "all-namespaces"?: boolean }): string[] | "all" | undefined {
  if (flags["all-namespaces"]) {
    if (flags["watch-namespaces"]) throw new Error("--watch-namespaces and --all-namespaces exclude each other");
    return "all";
  }
  const list = flags["watch-namespaces"]?.split(",").map((n) => n.trim()).filter(Boolean);
  return list?.length ? list : undefined;
}
