// A fresh namespace per test file (namespaces never finish deleting without a controller-manager).
import { inject } from "vitest";
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import { spawnSync } from "node:child_process";
import { waitFor } from "../../support/wait-for.ts";

export function kubeConfig(who: "admin" | "agent" = "admin"): KubeConfig {
  const kube = inject("kube");
  const kc = new KubeConfig();
  kc.loadFromFile(who === "admin" ? kube.adminKubeconfig : kube.agentKubeconfig);
  return kc;
}

export async function freshNamespace(prefix: string): Promise<string> {
  const name = `${prefix}-${Math.random().toString(36).slice(2, 8)}`;
  await kubeConfig().makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name } } });
  return name;
}

/** The machine's kubectl as cluster admin. */
export function kubectl(args: string[], input?: string): { status: number; stdout: string; stderr: string } {
  const r = spawnSync("kubectl", ["--kubeconfig", inject("kube").adminKubeconfig, ...args], { encoding: "utf8", input, timeout: 60_000, maxBuffer: 256 * 1024 * 1024 });
  return { status: r.status ?? 1, stdout: r.stdout ?? "", stderr: r.stderr ?? "" };
}

/** kubectl that must succeed; returns stdout. */
export function kubectlOk(args: string[], input?: string): string {
  const r = kubectl(args, input);
  if (r.status !== 0) throw new Error(`kubectl ${args.join(" ")}: ${r.stderr}`);
  return r.stdout;
}

/** Polls `check` until it returns a value other than undefined/false (test/support/wait-for.ts). */
export function until<T>(what: string, check: () => T | undefined | false | Promise<T | undefined | false>, timeoutMs = 30_000): Promise<T> {
  return waitFor(check, { what, timeoutMs, intervalMs: 50 });
}

/** Rows of `kubectl get` output as header → cell maps. */
export function table(out: string): Record<string, string>[] {
  const lines = out.trim().split("\n");
  const header = lines[0]!;
  const starts = [...header.matchAll(/\S+/g)].map((m) => ({ name: m[0], at: m.index! }));
  return lines.slice(1).map((line) =>
    Object.fromEntries(starts.map((s, i) => [s.name, line.slice(s.at, starts[i + 1]?.at ?? line.length).trim()])),
  );
}
