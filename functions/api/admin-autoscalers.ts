// Admin HTTP API for a template's PoolAutoscaler (OpenKruise §1.9; the CRD's spec without
// scaleTargetRef, which the path names):
//   GET    /admin/teams/{team}/templates/{id}/autoscaler   status (last decision, conditions, events)
//   PUT    /admin/teams/{team}/templates/{id}/autoscaler   set the spec; evaluated at once
//   DELETE /admin/teams/{team}/templates/{id}/autoscaler   remove (the pool keeps its current size)
import { Hono, type Context } from "hono";
import { setAutoscaler } from "../../durable-objects/operations/autoscalers.ts";
import { getDb } from "../../durable-objects/store/db.ts";
import { getTemplate } from "../../durable-objects/store/templates.ts";
import { AutoscalerSpec } from "../../schema/api/autoscaler.ts";
import { TemplateId } from "../../schema/api/template.ts";
import { TeamName } from "../../schema/api/team.ts";
import { ApiError } from "../api-error.ts";
import { requireAdmin } from "../auth/middleware.ts";
import { parseOr400, readJson } from "../body.ts";
import type { AppEnv } from "../env.ts";
import { teamOr404 } from "./admin-templates.ts";
import { poolStub } from "./stubs.ts";

export const adminAutoscalers = new Hono<AppEnv>();
adminAutoscalers.use("/admin/*", requireAdmin());

const PATH = "/admin/teams/:team/templates/:id/autoscaler";

async function target(c: Context<AppEnv>) {
  const team = await teamOr404(c, parseOr400(TeamName, c.req.param("team"), "team name"));
  return { teamId: team.id, templateId: parseOr400(TemplateId, c.req.param("id"), "template id") };
}

adminAutoscalers.get(PATH, async (c) => {
  const { teamId, templateId } = await target(c);
  if (!(await getTemplate(getDb(c.env), teamId, templateId))) throw new ApiError("template_not_found", `Template "${templateId}" not found`);
  const res = await poolStub(c.env, teamId, templateId).autoscalerStatus();
  if (!res.ok) throw ApiError.from(res.error);
  return c.json(res.status);
});

adminAutoscalers.put(PATH, async (c) => {
  const { teamId, templateId } = await target(c);
  const spec = await readJson(c, AutoscalerSpec);
  const res = await setAutoscaler(c.env, teamId, templateId, spec);
  if (!res.ok) throw ApiError.from(res.error);
  return c.json(res.status);
});

adminAutoscalers.delete(PATH, async (c) => {
  const { teamId, templateId } = await target(c);
  const res = await setAutoscaler(c.env, teamId, templateId, null);
  if (!res.ok) throw ApiError.from(res.error);
  return c.body(null, 204);
});
