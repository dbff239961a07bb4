// The edge's check of an agent's bearer token: the token of the cluster it acts as, never the
// deployment's CLUSTER_TOKEN itself (schema/protocol/cluster-token.ts says why). Used by the link
// route and by the route an agent fetches a build's files from (for builds of its own cluster).
import { clusterTokenFor } from "../../schema/protocol/cluster-token.ts";

const bearer = (authorization: string | undefined) => (authorization?.startsWith("Bearer ") ? authorization.slice(7) : "");

/** Whether `authorization` is `Bearer <the token of cluster>` (constant time). */
export async function isClusterToken(root: string | undefined, cluster: string, authorization: string | undefined): Promise<boolean> {
  if (!root) return false;
  return sameSecret(bearer(authorization), await clusterTokenFor(root, cluster));
}

/** Why a token that is not the cluster's is refused: an agent still holding the edge's own
 * CLUSTER_TOKEN (as every cluster did before tokens were per cluster) is told what to hold instead. */
export async function clusterTokenRefusal(root: string | undefined, authorization: string | undefined): Promise<string> {
  if (root && (await sameSecret(bearer(authorization), root))) return "this is the edge's own CLUSTER_TOKEN, which links no cluster: give the agent its cluster's token (npm run cluster-token -- <cluster id>; k8s/README.md)";
  return "invalid cluster token";
}

/** Constant-time comparison: both sides are hashed first, so length does not leak either. */
export async function sameSecret(a: string, b: string): Promise<boolean> {
  const enc = new TextEncoder();
  const [da, db] = await Promise.all([crypto.subtle.digest("SHA-256", enc.encode(a)), crypto.subtle.digest("SHA-256", enc.encode(b))]);
  return crypto.subtle.timingSafeEqual(da, db);
}
