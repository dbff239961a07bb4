// The agent link: `GET /agent/v1/connect?cluster=<id>` with `Authorization: Bearer <token of id>`
// upgrades to the WebSocket that ClusterDO(<id>) serves (protocol in schema/protocol/). The token
// is that cluster's own (schema/protocol/cluster-token.ts: derived from CLUSTER_TOKEN and the id),
// so the id a request names is bound to the token it holds; it is checked here, before any Durable
// Object is touched. Each link is noted in libSQL (best effort,
// beside the link) so the console can list every cluster whose agent has linked.
import { Hono } from "hono";
import { CLUSTER_HEADER } from "../durable-objects/cluster/cluster-do.ts";
import { getDb } from "../durable-objects/store/db.ts";
import { recordClusterLink } from "../durable-objects/store/clusters.ts";
import { clusterTokenRefusal, isClusterToken } from "../durable-objects/cluster/cluster-auth.ts";
import { CLUSTER_ID } from "../schema/protocol/cluster-token.ts";
import { errorResponse } from "./api-error.ts";
import type { AppEnv } from "./env.ts";

export const AGENT_LINK_PATH = "/agent/v1/connect";

export const agentLink = new Hono<AppEnv>();

agentLink.get(AGENT_LINK_PATH, async (c) => {
  if (!c.env.CLUSTER_TOKEN) return errorResponse("unauthorized", "the edge has no CLUSTER_TOKEN configured");
  const cluster = c.req.query("cluster") ?? "local";
  if (!CLUSTER_ID.test(cluster)) return errorResponse("bad_request", "cluster must be 1-63 characters of [a-z0-9-]");
  const auth = c.req.header("Authorization");
  if (!(await isClusterToken(c.env.CLUSTER_TOKEN, cluster, auth))) return errorResponse("unauthorized", await clusterTokenRefusal(c.env.CLUSTER_TOKEN, auth));
  if (c.req.header("Upgrade")?.toLowerCase() !== "websocket") {
    return Response.json({ code: 426, message: "expected a WebSocket upgrade" }, { status: 426, headers: { Upgrade: "websocket" } });
  }
  const headers = new Headers(c.req.raw.headers);
  headers.set(CLUSTER_HEADER, cluster);
  const stub = c.env.CLUSTER.get(c.env.CLUSTER.idFromName(cluster));
  const res = await stub.fetch(new Request(c.req.raw, { headers }));
  if (res.status === 101) c.executionCtx.waitUntil(recordClusterLink(getDb(c.env), cluster).catch(() => {}));
  return res;
});
