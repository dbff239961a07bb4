// The team quota set with kubectl: annotations of the team's Namespace (team = namespace), e.g.
//   kubectl annotate ns team-a quota.agents.kruise.io/running-sandboxes=10
// Annotations of the Namespace rather than a ConfigMap in it: the team's own namespace-admins can
// edit ConfigMaps in their namespace (and so raise their own quota), but not the Namespace object,
// which only the platform team edits; and it needs no new kind. Pure: annotations → the admin
// API's limits (`PUT /admin/teams/{team}/quota` body), or the reason they are refused.
import { TeamQuotaUpdate, type QuotaName } from "../../../schema/api/quota.ts";

export const QUOTA_ANNOTATION_PREFIX = "quota.agents.kruise.io/";

/** Annotation (after the prefix) → the quota it sets. */
export const QUOTA_ANNOTATIONS: Record<string, QuotaName> = {
  "running-sandboxes": "runningSandboxes",
  vcpus: "vcpus",
  "memory-mb": "memoryMB",
  "creates-per-minute": "createsPerMinute",
  "paused-sandboxes": "pausedSandboxes",
  snapshots: "snapshots",
};

/** The quota annotations of a Namespace (the others ignored), as a stable key to compare runs by. */
export function quotaAnnotationsOf(annotations: Record<string, string> | undefined): Record<string, string> {
  return Object.fromEntries(Object.entries(annotations ?? {}).filter(([k]) => k.startsWith(QUOTA_ANNOTATION_PREFIX)).sort(([a], [b]) => a.localeCompare(b)));
}

/** The limits the annotations set (none: `{}`, the defaults), or why they are refused. */
export function quotaFromAnnotations(annotations: Record<string, string> | undefined): { ok: true; limits: TeamQuotaUpdate } | { ok: false; message: string } {
  const limits: Record<string, number> = {};
  const problems: string[] = [];
  for (const [key, raw] of Object.entries(quotaAnnotationsOf(annotations))) {
    const name = QUOTA_ANNOTATIONS[key.slice(QUOTA_ANNOTATION_PREFIX.length)];
    if (!name) problems.push(`unknown annotation ${key} (known: ${Object.keys(QUOTA_ANNOTATIONS).map((k) => QUOTA_ANNOTATION_PREFIX + k).join(", ")})`);
    else if (!/^\d{1,10}$/.test(raw.trim())) problems.push(`${key}: ${JSON.stringify(raw.slice(0, 64))} is not a whole number ≥ 0`);
    else limits[name] = Number(raw.trim());
  }
  const parsed = TeamQuotaUpdate.safeParse(limits);
  if (!parsed.success) problems.push(...parsed.error.issues.map((i) => `${QUOTA_ANNOTATION_PREFIX}${Object.keys(QUOTA_ANNOTATIONS).find((k) => QUOTA_ANNOTATIONS[k] === i.path[0]) ?? ""}: ${i.message}`));
  return problems.length ? { ok: false, message: `quota not changed: ${problems.join("; ")}` } : { ok: true, limits: parsed.data! };
}
