// Templates: SandboxSet specs per team. Shared with PoolDO (edge-B), which reads them here.
import { and, asc, eq, gt, or, sql, type SQL } from "drizzle-orm";
import { TemplateSpec, templateRevision, type TemplateRecord } from "../../schema/api/template.ts";
import { teams, templates } from "../../schema/db/tables.ts";
import type { Db } from "./db.ts";

/** The condition "the template row is placed on `cluster`" for a query: its spec names the cluster;
 * parsed, a spec without one is "local" (schema/api/template.ts). */
export function placedOn(cluster: string): SQL {
  return sql`coalesce(json_extract(${templates.spec}, '$.cluster'), 'local') = ${cluster}`;
}

function toRecord(row: typeof templates.$inferSelect): TemplateRecord {
  return { ...row, spec: TemplateSpec.parse(row.spec) };
}

/** The team's own template of that id, else a public one (the seeded `base`). */
export async function resolveTemplate(db: Db, teamId: string, templateId: string): Promise<TemplateRecord | undefined> {
  const rows = await db
    .select()
    .from(templates)
    .where(and(eq(templates.templateId, templateId), or(eq(templates.teamId, teamId), eq(templates.public, true))));
  const own = rows.find((r) => r.teamId === teamId) ?? rows[0];
  return own && toRecord(own);
}

export async function getTemplate(db: Db, teamId: string, templateId: string): Promise<TemplateRecord | undefined> {
  const rows = await db.select().from(templates).where(and(eq(templates.teamId, teamId), eq(templates.templateId, templateId))).limit(1);
  return rows[0] && toRecord(rows[0]);
}

/** Templates a team can use (its own and public ones); `null` lists every team's. */
export async function listTemplates(db: Db, teamId: string | null): Promise<TemplateRecord[]> {
  const q = db.select().from(templates);
  const rows = await (teamId === null ? q : q.where(or(eq(templates.teamId, teamId), eq(templates.public, true)))).orderBy(
    asc(templates.templateId),
    asc(templates.teamId),
  );
  return rows.map(toRecord);
}

/** Where a page of `listOwnTemplatePage` starts: after this team's template. */
export interface TemplatePageCursor {
  teamName: string;
  templateId: string;
}

/**
 * Up to `limit` templates teams own (not other teams' public ones), in (team name, template id)
 * order after `after`; `teamId` null: every team's. One query: the console pages pools with it,
 * asking each listed pool's PoolDO, so a page bounds its Durable Object calls.
 */
export async function listOwnTemplatePage(
  db: Db,
  opts: { teamId: string | null; after?: TemplatePageCursor; limit: number },
): Promise<(TemplateRecord & { teamName: string })[]> {
  const a = opts.after;
  const rows = await db
    .select({ t: templates, teamName: teams.name })
    .from(templates)
    .innerJoin(teams, eq(teams.id, templates.teamId))
    .where(
      and(
        opts.teamId === null ? undefined : eq(templates.teamId, opts.teamId),
        a && or(gt(teams.name, a.teamName), and(eq(teams.name, a.teamName), gt(templates.templateId, a.templateId))),
      ),
    )
    .orderBy(asc(teams.name), asc(templates.templateId))
    .limit(opts.limit);
  return rows.map((r) => ({ ...toRecord(r.t), teamName: r.teamName }));
}

/** Whether a template write failed because its spec names a root filesystem a template delete freed
 * (the `freed_images` triggers, migration 0011). */
export function namesFreedImage(err: unknown): boolean {
  for (let e = err; e instanceof Error; e = e.cause) if (e.message.includes("image_freed")) return true;
  return false;
}

export async function upsertTemplate(
  db: Db,
  opts: { teamId: string; templateId: string; public: boolean; spec: TemplateSpec; now?: number },
): Promise<TemplateRecord> {
  const now = opts.now ?? Date.now();
  const revision = templateRevision(opts.spec);
  const rows = await db
    .insert(templates)
    .values({ teamId: opts.teamId, templateId: opts.templateId, public: opts.public, spec: opts.spec, revision, createdAt: now, updatedAt: now })
    .onConflictDoUpdate({ target: [templates.teamId, templates.templateId], set: { public: opts.public, spec: opts.spec, revision, updatedAt: now } })
    .returning();
  return toRecord(rows[0]!);
}

export async function scaleTemplate(db: Db, teamId: string, templateId: string, replicas: number, now = Date.now()): Promise<TemplateRecord | undefined> {
  const current = await getTemplate(db, teamId, templateId);
  if (!current) return undefined;
  const spec = { ...current.spec, replicas };
  const rows = await db
    .update(templates)
    .set({ spec, updatedAt: now })
    .where(and(eq(templates.teamId, teamId), eq(templates.templateId, templateId)))
    .returning();
  return rows[0] && toRecord(rows[0]);
}

export async function deleteTemplate(db: Db, teamId: string, templateId: string): Promise<boolean> {
  const rows = await db
    .delete(templates)
    .where(and(eq(templates.teamId, teamId), eq(templates.templateId, templateId)))
    .returning({ id: templates.templateId });
  return rows.length > 0;
}
