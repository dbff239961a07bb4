// GET /templates and GET /templates/{id}: the templates a team may create sandboxes from (its
// own and public ones), as E2B `Template` / `TemplateWithBuilds`. One build per revision.
import { Hono } from "hono";
import type { z } from "zod";
import type { Template, TemplateRecord, TemplateWithBuilds } from "../../schema/api/template.ts";
import { ApiError } from "../api-error.ts";
import type { AppEnv } from "../env.ts";
import { getDb } from "../../durable-objects/store/db.ts";
import { listTemplates, resolveTemplate } from "../../durable-objects/store/templates.ts";

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

function renderWithBuilds(t: TemplateRecord): z.infer<typeof TemplateWithBuilds> {
  const at = iso(t.updatedAt);
  const { cpuCount, memoryMB, diskSizeMB, envdVersion } = t.spec;
  return {
    templateID: t.templateId,
    public: t.public,
    aliases: [t.templateId],
    names: [t.templateId],
    createdAt: iso(t.createdAt),
    updatedAt: at,
    lastSpawnedAt: null,
    spawnCount: 0,
    builds: [{ buildID: t.revision, status: "ready", createdAt: at, updatedAt: at, finishedAt: at, cpuCount, memoryMB, diskSizeMB, envdVersion }],
  };
}

templates.get("/templates", async (c) => {
  const caller = c.get("caller");
  const rows = await listTemplates(getDb(c.env), caller.admin ? null : caller.teamId);
  return c.json(rows.map(renderTemplate));
});

templates.get("/templates/:templateId", async (c) => {
  const id = c.req.param("templateId");
  const t = await resolveTemplate(getDb(c.env), c.get("caller").teamId, id);
  if (!t) throw new ApiError("template_not_found", `Template "${id}" not found`);
  return c.json(renderWithBuilds(t));
});
