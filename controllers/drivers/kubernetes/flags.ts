// The agent's command-line flags for the kubernetes driver. Kept apart from from-flags.ts so the
// agent can declare them without loading the Kubernetes client unless the driver is chosen.
export const KUBERNETES_FLAGS = {
  kubeconfig: { type: "string" },
  namespace: { type: "string", default: "default" },
  // More team namespaces to watch and sync (comma-separated), or every namespace (cluster-wide RBAC).
  "watch-namespaces": { type: "string" },
  "all-namespaces": { type: "boolean", default: false },
  "runtime-image": { type: "string", default: "ghcr.io/kruise-edge/sandbox-agent:0.1.0" },
} as const;

/** `--watch-namespaces a,b` / `--all-namespaces` as the driver's and the CRD link's option. */
export function watchNamespacesFlag(flags: { "watch-namespaces"?: string; "all-namespaces"?: boolean }): string[] | "all" | undefined {
  if (flags["all-namespaces"]) {
    if (flags["watch-namespaces"]) throw new Error("--watch-namespaces and --all-namespaces exclude each other");
    return "all";
  }
  const list = flags["watch-namespaces"]?.split(",").map((n) => n.trim()).filter(Boolean);
  return list?.length ? list : undefined;
}
