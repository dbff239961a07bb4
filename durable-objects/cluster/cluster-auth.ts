// The edge's check of an agent's bearer token: the token of the cluster it acts as, never the
// deployment's CLUSTER_TOKEN itself (schema/protocol/cluster-token.ts says why). Used by the link
// route and by the route an agent fetches a build's files from (for builds of its own cluster).
import { clusterTokenFor } from "../../schema/protocol/cluster-token.ts";

/** Whether `authorization` is `Bearer <the token of cluster>` (constant time). */
export async function isClusterToken(root: string | undefined, cluster: string, authorization: string | undefined): Promise<boolean> {
  if (!root) return false;
  const auth = authorization ?? "";
  return sameSecret(auth.startsWith("Bearer ") ? auth.slice(7) : "", await clusterTokenFor(root, cluster));
}

/** Constant-time comparison: both sides are hashed first, so length does not leak either. */
export async function sameSecret(a: string, b: string): Promise<boolean> {
  const enc = new TextEncoder();
  const [da, db] = await Promise.all([crypto.subtle.digest("SHA-256", enc.encode(a)), crypto.subtle.digest("SHA-256", enc.encode(b))]);
  return crypto.subtle.timingSafeEqual(da, db);
}
