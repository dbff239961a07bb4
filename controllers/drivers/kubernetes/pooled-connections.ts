// @kubernetes/client-node 2.0.1 builds a new undici Agent for every API request of its generated
// clients (KubeConfig.applySecurityAuthentication → createDispatcher), so every request opens a new
// TLS connection: a handshake on both sides, most of the agent's CPU under a burst of claims and a
// good part of the API server's. Watches already reuse their agent (createAgent has a cache); this
// gives request dispatchers the same: one per cluster and user, kept for the KubeConfig's life.
import type { KubeConfig } from "@kubernetes/client-node";

const pooled = new WeakSet<KubeConfig>();

type DispatcherFactory = { createDispatcher(cluster: { server?: string; name?: string } | null, options: unknown): unknown };

/** Makes `kc`'s API clients share one connection pool per cluster and user. Idempotent. */
export function poolConnections(kc: KubeConfig): KubeConfig {
  if (pooled.has(kc)) return kc;
  const target = kc as unknown as DispatcherFactory;
  if (typeof target.createDispatcher !== "function") return kc; // a client version without it
  const create = target.createDispatcher.bind(kc);
  const cache = new Map<string, unknown>();
  target.createDispatcher = (cluster, options) => {
    const key = `${cluster?.name ?? ""}|${cluster?.server ?? ""}|${kc.getCurrentUser()?.name ?? ""}`;
    if (!cache.has(key)) cache.set(key, create(cluster, options));
    return cache.get(key);
  };
  pooled.add(kc);
  return kc;
}
