// How the gateway reaches a cluster's ingress: its URL (from the ClusterDO, which learns it from the
// agent's hello) and the signing key derived from the cluster token. Both are cached per isolate:
// the URL for a few seconds (an agent restart may move it; a failed forward drops the entry), the
// key for the life of the isolate.
import { ingressKey } from "../../schema/ingress/signature.ts";
import type { Env } from "../env.ts";

const URL_TTL_MS = 5_000;
const urls = new Map<string, { url: string | null; until: number }>();
let keyFor: { token: string; key: Promise<CryptoKey> } | undefined;

export function signingKey(env: Env): Promise<CryptoKey> {
  if (!keyFor || keyFor.token !== env.CLUSTER_TOKEN) keyFor = { token: env.CLUSTER_TOKEN, key: ingressKey(env.CLUSTER_TOKEN) };
  return keyFor.key;
}

export async function ingressUrl(env: Env, cluster: string, now: number): Promise<string | null> {
  const cached = urls.get(cluster);
  if (cached && cached.until > now) return cached.url;
  const status = await env.CLUSTER.get(env.CLUSTER.idFromName(cluster)).status();
  const url = status.connected ? status.ingressUrl : null;
  urls.set(cluster, { url, until: now + URL_TTL_MS });
  return url;
}

export function forgetIngress(cluster: string): void {
  urls.delete(cluster);
}
