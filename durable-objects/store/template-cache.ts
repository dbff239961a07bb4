// Per-isolate cache of template resolution for the create path, so a warm create costs no
// libSQL round trip. Knob: TEMPLATE_CACHE_TTL_MS bounds how long another isolate may serve a
// template after the admin API changed or deleted it (this isolate is evicted at once).
import type { TemplateRecord } from "../../schema/api/template.ts";
import type { Db } from "./db.ts";
import { resolveTemplate } from "./templates.ts";
import { TtlCache } from "./ttl-cache.ts";

export const TEMPLATE_CACHE_TTL_MS = 10_000;

const cache = new TtlCache<TemplateRecord | undefined>(TEMPLATE_CACHE_TTL_MS);

export function resolveTemplateCached(db: Db, teamId: string, templateId: string, now = Date.now()): Promise<TemplateRecord | undefined> {
  return cache.get(`${teamId}/${templateId}`, () => resolveTemplate(db, teamId, templateId), now);
}

export function evictTemplates(): void {
  cache.clear();
}
