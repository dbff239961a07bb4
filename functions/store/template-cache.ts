// Per-isolate cache of template resolution for the create path, so a warm create costs no
// libSQL round trip. Knob: TEMPLATE_CACHE_TTL_MS bounds how long another isolate may serve a
// template after the admin API changed or deleted it (this isolate is evicted at once).
import type { TemplateRecord } from "../../schema/api/template.ts";
import type { Db } from "./db.ts";
import { resolveTemplate } from "./templates.ts";

export const TEMPLATE_CACHE_TTL_MS = 10_000;

const cache = new Map<string, { record: TemplateRecord | undefined; until: number }>();

export async function resolveTemplateCached(db: Db, teamId: string, templateId: string, now = Date.now()): Promise<TemplateRecord | undefined> {
  const key = `${teamId}/${templateId}`;
  const hit = cache.get(key);
  if (hit && hit.until > now) return hit.record;
  const record = await resolveTemplate(db, teamId, templateId);
  cache.set(key, { record, until: now + TEMPLATE_CACHE_TTL_MS });
  return record;
}

export function evictTemplates(): void {
  cache.clear();
}
