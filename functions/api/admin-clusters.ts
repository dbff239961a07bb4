// Admin view of the clusters that serve this edge: whether the agent is connected, which driver and
// isolation level it runs, its ingress and backlog. `npm start` waits on it before seeding.
//   GET /admin/clusters/{cluster}
import { Hono } from "hono";
import { z } from "zod";
import { requireAdmin } from "../auth/middleware.ts";
import { parseOr400 } from "../body.ts";
import type { AppEnv } from "../env.ts";

const ClusterName = z.string().regex(/^[a-z0-9][a-z0-9-]{0,62}$/, "cluster names are [a-z0-9-]");

export const adminClusters = new Hono<AppEnv>();
adminClusters.use("/admin/clusters/*", requireAdmin());

adminClusters.get("/admin/clusters/:cluster", async (c) => {
  const name = parseOr400(ClusterName, c.req.param("cluster"), "cluster name");
  return c.json(await c.env.CLUSTER.get(c.env.CLUSTER.idFromName(name)).status());
});
