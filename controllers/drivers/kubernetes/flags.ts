// The agent's command-line flags for the kubernetes driver. Kept apart from from-flags.ts so the
// agent can declare them without loading the Kubernetes client unless the driver is chosen.
export const KUBERNETES_FLAGS = {
  kubeconfig: { type: "string" },
  namespace: { type: "string", default: "default" },
  "runtime-image": { type: "string", default: "ghcr.io/kruise-edge/sandbox-agent:0.1.0" },
} as const;
