// How the gateway reaches a cluster's ingress: its URL (from the ClusterDO, which learns it from the
// agent's hello) and the signing key derived from that cluster's own token (one key per cluster:
// a cluster's ingress accepts no request signed for another's sandboxes). Both are cached per isolate:
// the URL for a few seconds (an agent restart may move it; a failed forward drops the entry), its
// absence for half a second, the key for the life of the isolate. Here, not in functions/, because
// objects call sandboxes' runtimes too (lifecycle hooks, hooks/run-hook.ts).
import { ingressKey, SIGNATURE_HEADER, signIngress } from "../schema/ingress/signature.ts";
import { clusterTokenFor } from "../schema/protocol/cluster-token.ts";
import type { Env } from "./env.ts";
import { currentTraceparent } from "./tracing/edge-tracing.ts";

const URL_TTL_MS = 5_000;
/** "Not connected" is kept shorter: a restarted agent is served again as soon as it is back. */
const DOWN_TTL_MS = 500;
const urls = new Map<string, { url: string | null; until: number }>();
/** Keys by cluster, for one root token (a changed CLUSTER_TOKEN starts afresh); clusters are few. */
let keys: { root: string; byCluster: Map<string, Promise<CryptoKey>> } | undefined;

export function signingKey(env: Env, cluster: string): Promise<CryptoKey> {
  if (!keys || keys.root !== env.CLUSTER_TOKEN) keys = { root: env.CLUSTER_TOKEN, byCluster: new Map() };
  let key = keys.byCluster.get(cluster);
  if (!key) {
    key = clusterTokenFor(env.CLUSTER_TOKEN, cluster).then(ingressKey);
    keys.byCluster.set(cluster, key);
  }
  return key;
}

export async function ingressUrl(env: Env, cluster: string, now: number): Promise<string | null> {
  const cached = urls.get(cluster);
  if (cached && cached.until > now) return cached.url;
  const status = await env.CLUSTER.get(env.CLUSTER.idFromName(cluster)).status();
  const url = status.connected ? status.ingressUrl : null;
  urls.set(cluster, { url, until: now + (url ? URL_TTL_MS : DOWN_TTL_MS) });
  return url;
}

export function forgetIngress(cluster: string): void {
  urls.delete(cluster);
}

/** A request the edge itself makes to a sandbox's runtime (not a forwarded client request). */
export interface EdgeCall {
  cluster: string;
  sandboxId: string;
  port: number;
  method: "GET" | "POST";
  pathAndQuery: string;
  /** Sent as is (the signature does not cover bodies), with these extra headers. */
  body?: BodyInit;
  headers?: Record<string, string>;
  /** The sandbox's envd token, sent as X-Access-Token; null when the runtime is unsecured. */
  accessToken: string | null;
  timeoutMs: number;
}

/** Signs and sends `call` to the cluster's ingress; null when the ingress is unknown or unreachable
 * (the caller decides what that means for its answer). */
export async function edgeFetch(env: Env, call: EdgeCall): Promise<Response | null> {
  const base = await ingressUrl(env, call.cluster, Date.now());
  if (!base) return null;
  const headers = new Headers({ "e2b-sandbox-id": call.sandboxId, "e2b-sandbox-port": String(call.port) });
  headers.set(SIGNATURE_HEADER, await signIngress(await signingKey(env, call.cluster), { sandboxId: call.sandboxId, port: call.port, method: call.method, pathAndQuery: call.pathAndQuery }, Date.now()));
  if (call.accessToken !== null) headers.set("x-access-token", call.accessToken);
  for (const [k, v] of Object.entries(call.headers ?? {})) headers.set(k, v);
  // A hook or probe run in a traced step: the ingress and the runtime join its trace.
  const traceparent = currentTraceparent();
  if (traceparent) headers.set("traceparent", traceparent);
  try {
    // A redirect is the sandbox's answer (a hook's or probe's 3xx counts as Kubernetes counts it),
    // never followed: the sandbox names its Location, and following would send this request, with
    // its access token, from the edge to an address the tenant picked.
    return await fetch(new URL(call.pathAndQuery, base), { method: call.method, headers, body: call.body, redirect: "manual", signal: AbortSignal.timeout(call.timeoutMs) });
  } catch {
    forgetIngress(call.cluster);
    return null;
  }
}

/** Bytes of a sandbox's answer (its runtime's or a port's) read at most by default. */
const MAX_READ = 1 << 20;

/** The first `max` bytes of a response's body (the rest is dropped): a sandbox's answer is the
 * tenant's (on Kubernetes its runtime is the pod's), so it is never read whole. */
export async function readBounded(res: Response, max = MAX_READ): Promise<Uint8Array> {
  const reader = res.body?.getReader();
  if (!reader) return new Uint8Array();
  const parts: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    parts.push(value);
    size += value.length;
    if (size >= max) {
      await reader.cancel();
      break;
    }
  }
  const out = new Uint8Array(Math.min(size, max));
  let at = 0;
  for (const p of parts) {
    if (at >= out.length) break;
    out.set(p.subarray(0, out.length - at), at);
    at += p.length;
  }
  return out;
}

/** `readBounded`'s bytes as text (a cut character at the end decodes as U+FFFD). */
export async function readBoundedText(res: Response, max = MAX_READ): Promise<string> {
  return new TextDecoder().decode(await readBounded(res, max));
}
