// The kube tier's usual pool: a SandboxSet applied with kubectl (as a platform team would), and
// optionally waited for until `kubectl get sbs` shows its warm members available.
import { kubectlOk, table, until } from "./namespace.ts";

export interface SandboxSetFixture {
  /** Warm members (default 1). */
  replicas?: number;
  /** The sandbox container's image (default python:3.12). */
  image?: string;
  /** Wait until this many members are available (the agent, edge and kubelet must be running). */
  available?: number;
  timeoutMs?: number;
  /** A volumeClaimTemplate `work` of 1Gi (a PVC per sandbox, kept across recreates). */
  volume?: boolean;
}

/** The manifest `withSandboxSet` applies. */
export function sandboxSetManifest(name: string, opts: SandboxSetFixture = {}): string {
  return `apiVersion: agents.kruise.io/v1alpha1
kind: SandboxSet
metadata: { name: ${name} }
spec:
  replicas: ${opts.replicas ?? 1}
  template: { spec: { containers: [{ name: sandbox, image: ${opts.image ?? "python:3.12"} }] } }
${opts.volume ? "  volumeClaimTemplates:\n    - metadata: { name: work }\n      spec: { resources: { requests: { storage: 1Gi } } }\n" : ""}`;
}

/** Applies SandboxSet `name` in `ns`; with `available`, resolves once that many members are. */
export async function withSandboxSet(ns: string, name: string, opts: SandboxSetFixture = {}): Promise<void> {
  kubectlOk(["-n", ns, "apply", "-f", "-"], sandboxSetManifest(name, opts));
  const want = opts.available;
  if (want === undefined) return;
  await until(`${ns}/${name}: ${want} available`, () => table(kubectlOk(["-n", ns, "get", "sbs", name]))[0]?.AVAILABLE === String(want), opts.timeoutMs ?? 60_000);
}
