// Admin HTTP API for templates (SandboxSet specs per team). Every change is written to the store,
// then pushed to the template's PoolDO; `putTemplate`/`removeTemplate` are that path, shared with
// the CRD sync (ClusterDO applies a cluster's SandboxSets through them).
//   GET    /admin/teams/{team}/templates                 list with pool status
//   GET    /admin/teams/{team}/templates/{id}            one, with pool status
//   PUT    /admin/teams/{team}/templates/{id}            create or replace {public?, spec}
//   POST   /admin/teams/{team}/templates/{id}/scale      {replicas}
//   DELETE /admin/teams/{team}/templates/{id}            delete (drains the warm pool)
import { Hono, type Context } from "hono";
import { TemplateId, TemplateScale, TemplateUpsert, type TemplateRecord, type TemplateSpec } from "../../schema/api/template.ts";
import { TeamName } from "../../schema/api/team.ts";
import { ApiError } from "../api-error.ts";
import { requireAdmin } from "../auth/middleware.ts";
import { parseOr400, readJson } from "../body.ts";
import type { AppEnv, Env } from "../env.ts";
import { audit } from "../store/audit.ts";
import { getDb } from "../store/db.ts";
import { evictTemplates } from "../store/template-cache.ts";
import { deleteTemplate, getTemplate, listTemplates, scaleTemplate, upsertTemplate } from "../store/templates.ts";
import { ensureTeam, findTeamByName } from "../store/teams.ts";
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

async function configurePool(env: Env, t: TemplateRecord, teamName: string) {
  const res = await poolStub(env, t.teamId, t.templateId).configure({ teamId: t.teamId, teamName, templateId: t.templateId, revision: t.revision, spec: t.spec, cluster: t.spec.cluster });
  if (!res.ok) throw ApiError.from(res.error);
  return res.status;
}

/** Creates or replaces a team's template (the team is created when missing) and configures its pool. */
export async function putTemplate(env: Env, teamName: string, templateId: string, body: { public: boolean; spec: TemplateSpec }) {
  const db = getDb(env);
  const team = await ensureTeam(db, teamName);
  const existed = (await getTemplate(db, team.id, templateId)) !== undefined;
  const t = await upsertTemplate(db, { teamId: team.id, templateId, public: body.public, spec: body.spec });
  evictTemplates();
  return { template: t, pool: await configurePool(env, t, teamName), existed };
}

/** Deletes a team's template and drains its warm pool; false when there was none. */
export async function removeTemplate(env: Env, teamId: string, templateId: string): Promise<boolean> {
  const found = await deleteTemplate(getDb(env), teamId, templateId);
  evictTemplates();
  // Drained even when the row was already gone: a pool may outlive a lost delete.
  const res = await poolStub(env, teamId, templateId).destroy();
  if (!res.ok) throw ApiError.from(res.error);
  return found;
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
  const { template: t, pool, existed } = await putTemplate(c.env, name, templateId!, body);
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
  if (!(await removeTemplate(c.env, team.id, templateId!))) throw new ApiError("template_not_found", `Template "${templateId}" not found in team "${name}"`);
  c.executionCtx.waitUntil(audit(db, { teamId: team.id, keyId: c.get("caller").keyId, action: "template.delete", target: templateId }).catch(() => {}));
  return c.body(null, 204);
});
