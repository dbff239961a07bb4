// Admin HTTP API for team quotas (TeamQuotaDO): the limits in force (the team's own, else the
// deployment's defaults from the QUOTA_* vars) and what counts against them now.
//   GET /admin/teams/{team}/quota   {limits, overrides, usage}
//   PUT /admin/teams/{team}/quota   {runningSandboxes?, vcpus?, memoryMB?, createsPerMinute?, pausedSandboxes?, snapshots?}; left out: the default
import { Hono } from "hono";
import { TeamQuotaUpdate } from "../../schema/api/quota.ts";
import { TeamName } from "../../schema/api/team.ts";
import { ApiError } from "../api-error.ts";
import { requireAdmin } from "../auth/middleware.ts";
import { parseOr400, readJson } from "../body.ts";
import type { AppEnv } from "../env.ts";
import { audit } from "../../durable-objects/store/audit.ts";
import { getDb } from "../../durable-objects/store/db.ts";
import { teamOr404 } from "./admin-templates.ts";
import { setTeamQuota } from "../../durable-objects/operations/quotas.ts";
import { quotaStub } from "./stubs.ts";

export const adminQuotas = new Hono<AppEnv>();
adminQuotas.use("/admin/*", requireAdmin());

adminQuotas.get("/admin/teams/:team/quota", async (c) => {
  const team = await teamOr404(c, parseOr400(TeamName, c.req.param("team"), "team name"));
  const res = await quotaStub(c.env, team.id).status();
  if (!res.ok) throw ApiError.from(res.error);
  return c.json({ team: team.name, ...res.status });
});

adminQuotas.put("/admin/teams/:team/quota", async (c) => {
  const team = await teamOr404(c, parseOr400(TeamName, c.req.param("team"), "team name"));
  const body = await readJson(c, TeamQuotaUpdate);
  const res = await setTeamQuota(c.env, team.id, body);
  if (!res.ok) throw ApiError.from(res.error);
  c.executionCtx.waitUntil(audit(getDb(c.env), { teamId: team.id, keyId: c.get("caller").keyId, action: "quota.put", target: team.name, detail: body }).catch(() => {}));
  return c.json({ team: team.name, ...res.status });
});
