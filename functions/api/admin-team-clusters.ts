// Admin HTTP API for the team↔cluster bindings (durable-objects/operations/team-clusters.ts): which
// clusters may act for a team (its namespace's SandboxSets, SandboxClaims, quota annotations,
// policies and profiles) and get its profiles and secrets.
//   GET    /admin/teams/{team}/clusters             {team, clusters: [{team, cluster, createdAt}]}
//   PUT    /admin/teams/{team}/clusters/{cluster}   201 bound, 200 already bound
//   DELETE /admin/teams/{team}/clusters/{cluster}   204; 404 not bound; 409 while a template of the team runs there
import { Hono } from "hono";
import type { z } from "zod";
import { ClusterId, type TeamClusterBinding, type TeamClusterList } from "../../schema/api/team-cluster.ts";
import { TeamName } from "../../schema/api/team.ts";
import { ApiError } from "../api-error.ts";
import { requireAdmin } from "../auth/middleware.ts";
import { parseOr400 } from "../body.ts";
import type { AppEnv } from "../env.ts";
import { audit } from "../../durable-objects/store/audit.ts";
import { getDb } from "../../durable-objects/store/db.ts";
import { bindTeamCluster, listTeamClusters, unbindTeamCluster } from "../../durable-objects/operations/team-clusters.ts";
import { teamOr404 } from "./admin-templates.ts";

export const adminTeamClusters = new Hono<AppEnv>();
adminTeamClusters.use("/admin/*", requireAdmin());

adminTeamClusters.get("/admin/teams/:team/clusters", async (c) => {
  const team = await teamOr404(c, parseOr400(TeamName, c.req.param("team"), "team name"));
  const rows = await listTeamClusters(getDb(c.env), team.id);
  const out: z.infer<typeof TeamClusterList> = { team: team.name, clusters: rows.map((r) => ({ team: team.name, cluster: r.cluster, createdAt: new Date(r.createdAt).toISOString() })) };
  return c.json(out);
});

adminTeamClusters.put("/admin/teams/:team/clusters/:cluster", async (c) => {
  const team = await teamOr404(c, parseOr400(TeamName, c.req.param("team"), "team name"));
  const cluster = parseOr400(ClusterId, c.req.param("cluster"), "cluster name");
  const db = getDb(c.env);
  const { created } = await bindTeamCluster(db, team.id, cluster);
  if (created) c.executionCtx.waitUntil(audit(db, { teamId: team.id, keyId: c.get("caller").keyId, action: "cluster.bind", target: cluster }).catch(() => {}));
  const row = (await listTeamClusters(db, team.id)).find((r) => r.cluster === cluster);
  const out: TeamClusterBinding = { team: team.name, cluster, createdAt: new Date(row?.createdAt ?? Date.now()).toISOString() };
  return c.json(out, created ? 201 : 200);
});

adminTeamClusters.delete("/admin/teams/:team/clusters/:cluster", async (c) => {
  const team = await teamOr404(c, parseOr400(TeamName, c.req.param("team"), "team name"));
  const cluster = parseOr400(ClusterId, c.req.param("cluster"), "cluster name");
  const res = await unbindTeamCluster(c.env, team, cluster);
  if (!res.ok) throw ApiError.from(res.error);
  if (!res.found) throw new ApiError("not_found", `Team "${team.name}" is not bound to cluster "${cluster}"`);
  c.executionCtx.waitUntil(audit(getDb(c.env), { teamId: team.id, keyId: c.get("caller").keyId, action: "cluster.unbind", target: cluster }).catch(() => {}));
  return c.body(null, 204);
});
