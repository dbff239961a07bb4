// GET /templates and GET /templates/{id}: the templates a team may create sandboxes from (its
// own and public ones), as E2B `Template` / `TemplateWithBuilds`. A template built with
// `Template.build` lists its builds (newest first) to the team that owns it; any other shows one
// build per revision.
import { Hono } from "hono";
import type { z } from "zod";
import type { Template, TemplateRecord, TemplateWithBuilds } from "../../schema/api/template.ts";
import { ApiError } from "../api-error.ts";
import type { AppEnv } from "../env.ts";
import { getDb } from "../../durable-objects/store/db.ts";
import { listTemplates, resolveTemplate } from "../../durable-objects/store/templates.ts";
import { buildsOf, type BuildRow } from "../../durable-objects/store/template-builds.ts";
import type { BuildStatus } from "../../schema/api/template-build.ts";

export const templates = new Hono<AppEnv>();

function iso(ms: number): string {
  return new Date(ms).toISOString();
}

function renderTemplate(t: TemplateRecord): z.infer<typeof Template> {
  return {
    templateID: t.templateId,
    buildID: t.revision,
    cpuCount: t.spec.cpuCount,
    memoryMB: t.spec.memoryMB,
    diskSizeMB: t.spec.diskSizeMB,
    public: t.public,
    aliases: [t.templateId],
    names: [t.templateId],
    createdAt: iso(t.createdAt),
    updatedAt: iso(t.updatedAt),
    createdBy: null,
    lastSpawnedAt: null,
    spawnCount: 0,
    buildCount: 1,
    envdVersion: t.spec.envdVersion,
    buildStatus: "ready",
  };
}

function renderWithBuilds(t: TemplateRecord, built: BuildRow[]): z.infer<typeof TemplateWithBuilds> {
  const at = iso(t.updatedAt);
  const { cpuCount, memoryMB, diskSizeMB, envdVersion } = t.spec;
  const builds = built.length
    ? built.map((b) => ({ buildID: b.id, status: b.status as BuildStatus, createdAt: iso(b.createdAt), updatedAt: iso(b.updatedAt), ...(b.finishedAt ? { finishedAt: iso(b.finishedAt) } : {}), cpuCount: b.cpuCount, memoryMB: b.memoryMB, diskSizeMB, envdVersion }))
    : [{ buildID: t.revision, status: "ready" as const, createdAt: at, updatedAt: at, finishedAt: at, cpuCount, memoryMB, diskSizeMB, envdVersion }];
  return {
    templateID: t.templateId,
    public: t.public,
    aliases: [t.templateId],
    names: [t.templateId],
    createdAt: iso(t.createdAt),
    updatedAt: at,
    lastSpawnedAt: null,
    spawnCount: 0,
    builds,
  };
}

templates.get("/templates", async (c) => {
  const caller = c.get("caller");
  const rows = await listTemplates(getDb(c.env), caller.admin ? null : caller.teamId);
  return c.json(rows.map(renderTemplate));
});

templates.get("/templates/:templateId", async (c) => {
  const id = c.req.param("templateId");
  const caller = c.get("caller");
  const db = getDb(c.env);
  const t = await resolveTemplate(db, caller.teamId, id);
  if (!t) throw new ApiError("template_not_found", `Template "${id}" not found`);
  const built = t.teamId === caller.teamId || caller.admin ? await buildsOf(db, t.teamId, t.templateId) : [];
  return c.json(renderWithBuilds(t, built));
});
