// Each cluster's own agent token: HMAC-SHA256(CLUSTER_TOKEN, "cluster:" + id), lower-case hex.
// Why derived rather than stored: the deployment secret stays the one root the edge holds, yet a
// token names exactly one cluster, so whoever holds cluster b's token (a reader of b's
// `sandbox-agent` Secret, a compromised agent b) cannot link as cluster a, take a's intents or point
// the gateway at its own host (review 25 H1). The edge recomputes the token for the `?cluster=` it
// is asked for and compares in constant time; the agent only ever holds its own. The ingress
// signing key is derived from this token (schema/ingress/signature.ts), so it is per cluster too.
// WebCrypto only: the edge (workerd), the agent and the operator's CLI (Node) share this one home.

const encoder = new TextEncoder();

/** The token an agent of `cluster` presents, from the edge's CLUSTER_TOKEN. */
export async function clusterTokenFor(root: string, cluster: string): Promise<string> {
  const key = await crypto.subtle.importKey("raw", encoder.encode(root), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, encoder.encode(`cluster:${cluster}`)));
  let hex = "";
  for (const b of mac) hex += b.toString(16).padStart(2, "0");
  return hex;
}

/** A cluster id as the link accepts it (it names a Durable Object and a libSQL row). */
export const CLUSTER_ID = /^[a-z0-9-]{1,63}$/;
