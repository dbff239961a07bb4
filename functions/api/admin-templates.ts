// Admin HTTP API for templates (SandboxSet specs per team). Every change is written to the store,
// then pushed to the template's PoolDO: the template operations
// (durable-objects/operations/templates.ts), which the CRD sync applies a cluster's SandboxSets
// through too.
//   GET    /admin/teams/{team}/templates                 list with pool status
//   GET    /admin/teams/{team}/templates/{id}            one, with pool status (counts and the rolling
//                                                        update: updateRevision, currentRevision,
//                                                        updatedReplicas, updatedAvailableReplicas)
//   PUT    /admin/teams/{team}/templates/{id}            create or replace {public?, spec}; a new
//                                                        revision rolls the pool (spec.updateStrategy)
//   POST   /admin/teams/{team}/templates/{id}/scale      {replicas}
//   DELETE /admin/teams/{team}/templates/{id}            delete (drains the warm pool)
import { Hono, type Context } from "hono";
import { configurePool, putTemplate, removeTemplate } from "../../durable-objects/operations/templates.ts";
import { TemplateId, TemplateScale, TemplateUpsert, type TemplateRecord } from "../../schema/api/template.ts";
import { TeamName } from "../../schema/api/team.ts";
import { ApiError } from "../api-error.ts";
import { requireAdmin } from "../auth/middleware.ts";
import { parseOr400, readJson } from "../body.ts";
import type { AppEnv } from "../env.ts";
import { audit } from "../../durable-objects/store/audit.ts";
import { getDb } from "../../durable-objects/store/db.ts";
import { evictTemplates } from "../../durable-objects/store/template-cache.ts";
import { getTemplate, listTemplates, scaleTemplate } from "../../durable-objects/store/templates.ts";
import { findTeamByName } from "../../durable-objects/store/teams.ts";
import { poolStub } from "./stubs.ts";

export const adminTemplates = new Hono<AppEnv>();
adminTemplates.use("/admin/*", requireAdmin());

function names(c: Context<AppEnv>) {
  return {
    team: parseOr400(TeamName, c.req.param("team"), "team name"),
    templateId: c.req.param("id") === undefined ? undefined : parseOr400(TemplateId, c.req.param("id"), "template id"),
  };
}

/** The team named in the path, or 404. */
export async function teamOr404(c: Context<AppEnv>, name: string) {
  const team = await findTeamByName(getDb(c.env), name);
  if (!team) throw new ApiError("not_found", `Team "${name}" not found`);
  return team;
}

function render(t: TemplateRecord, pool: unknown) {
  return { teamId: t.teamId, templateId: t.templateId, public: t.public, revision: t.revision, spec: t.spec, createdAt: new Date(t.createdAt).toISOString(), updatedAt: new Date(t.updatedAt).toISOString(), pool };
}

adminTemplates.get("/admin/teams/:team/templates", async (c) => {
  const team = await teamOr404(c, names(c).team);
  const rows = (await listTemplates(getDb(c.env), null)).filter((t) => t.teamId === team.id);
  const pools = await Promise.all(rows.map((t) => poolStub(c.env, t.teamId, t.templateId).status()));
  return c.json(rows.map((t, i) => render(t, pools[i])));
});

adminTemplates.get("/admin/teams/:team/templates/:id", async (c) => {
  const { team: name, templateId } = names(c);
  const team = await teamOr404(c, name);
  const t = await getTemplate(getDb(c.env), team.id, templateId!);
  if (!t) throw new ApiError("template_not_found", `Template "${templateId}" not found in team "${name}"`);
  return c.json(render(t, await poolStub(c.env, t.teamId, t.templateId).status()));
});

adminTemplates.put("/admin/teams/:team/templates/:id", async (c) => {
  const { team: name, templateId } = names(c);
  const body = await readJson(c, TemplateUpsert);
  const db = getDb(c.env);
  const res = await putTemplate(c.env, { teamName: name, templateId: templateId!, ...body });
  if (!res.ok) throw ApiError.from(res.error);
  const { template: t, pool, existed } = res;
  c.executionCtx.waitUntil(audit(db, { teamId: t.teamId, keyId: c.get("caller").keyId, action: "template.put", target: t.templateId, detail: { revision: t.revision } }).catch(() => {}));
  return c.json(render(t, pool), existed ? 200 : 201);
});

adminTemplates.post("/admin/teams/:team/templates/:id/scale", async (c) => {
  const { team: name, templateId } = names(c);
  const body = await readJson(c, TemplateScale);
  const team = await teamOr404(c, name);
  const t = await scaleTemplate(getDb(c.env), team.id, templateId!, body.replicas);
  if (!t) throw new ApiError("template_not_found", `Template "${templateId}" not found in team "${name}"`);
  evictTemplates();
  return c.json(render(t, await configurePool(c.env, t, name)));
});

adminTemplates.delete("/admin/teams/:team/templates/:id", async (c) => {
  const { team: name, templateId } = names(c);
  const team = await teamOr404(c, name);
  const db = getDb(c.env);
  const res = await removeTemplate(c.env, team.id, templateId!);
  if (!res.ok) throw ApiError.from(res.error);
  if (!res.found) throw new ApiError("template_not_found", `Template "${templateId}" not found in team "${name}"`);
  c.executionCtx.waitUntil(audit(db, { teamId: team.id, keyId: c.get("caller").keyId, action: "template.delete", target: templateId }).catch(() => {}));
  return c.body(null, 204);
});
