// @kubernetes/client-node 2.0.1 builds a new undici Agent for every API request of its generated
// clients (KubeConfig.applySecurityAuthentication → createDispatcher), so every request opens a new
// TLS connection: a handshake on both sides, most of the agent's CPU under a burst of claims and a
// good part of the API server's. Watches already reuse their agent (createAgent has a cache); this
// gives request dispatchers the same: one per cluster and user, kept for the KubeConfig's life.
//
// And that one keeps its HTTP/2 session as client-go does (one connection to the API server, kept
// while idle for 90 s). With undici's defaults a session idle for 4 s was closed, and a session
// with 100 streams open counted as busy, so the pool opened another connection: every burst of
// claims (a Sandbox and a Pod patch each, 50 at once: over 100 requests) after a pause of a few
// seconds paid new TLS handshakes, in the agent and in the API server, during the claims
// (bench/kube.ts: the agent's CPU profile of the claims' windows). The API server's own limit on
// streams (SETTINGS_MAX_CONCURRENT_STREAMS, 250 by default) still applies: undici takes the lower.
import type { KubeConfig } from "@kubernetes/client-node";

/** How long an idle HTTP/2 session to the API server is kept (client-go's IdleConnTimeout). */
export const API_IDLE_MS = 90_000;
/** The streams one session may carry before the pool opens another (the server's limit wins). */
export const API_MAX_STREAMS = 1000;

const pooled = new WeakSet<KubeConfig>();

type DispatcherOptions = { type: string; connect?: object };
type DispatcherFactory = {
  createDispatcher(cluster: { server?: string; name?: string } | null, options: unknown): unknown;
  createDispatcherOptions?(cluster: { server?: string; name?: string } | null, options: unknown): DispatcherOptions;
};

/** Makes `kc`'s API clients share one connection pool per cluster and user. Idempotent. */
export function poolConnections(kc: KubeConfig): KubeConfig {
  if (pooled.has(kc)) return kc;
  const target = kc as unknown as DispatcherFactory;
  if (typeof target.createDispatcher !== "function") return kc; // a client version without it
  const create = target.createDispatcher.bind(kc);
  const cache = new Map<string, unknown>();
  target.createDispatcher = (cluster, options) => {
    const key = `${cluster?.name ?? ""}|${cluster?.server ?? ""}|${kc.getCurrentUser()?.name ?? ""}`;
    if (!cache.has(key)) cache.set(key, longLived(create(cluster, options), target.createDispatcherOptions?.call(kc, cluster, options)));
    return cache.get(key);
  };
  pooled.add(kc);
  return kc;
}

/** The client's direct-connection Agent made again, of the same class and with the same connect
 * options (TLS material), plus the session limits above; a proxy's dispatcher is left as made. */
function longLived(made: unknown, opts: DispatcherOptions | undefined): unknown {
  if (opts?.type !== "agent" || !opts.connect || typeof (made as { constructor?: unknown })?.constructor !== "function") return made;
  const Agent = (made as { constructor: new (o: object) => unknown }).constructor;
  void (made as { close?(): Promise<void> }).close?.(); // never used: no connection to close
  return new Agent({ connect: opts.connect, keepAliveTimeout: API_IDLE_MS, h2Options: { maxConcurrentStreams: API_MAX_STREAMS } });
}
