// Per-team quotas (issue 10.4): what the admin API sets and shows. A limit left out (or null)
// takes the deployment default (wrangler.toml vars QUOTA_*); a default left unset is no limit.
// TeamQuotaDO's ledger counts the sandbox ones (`SANDBOX_QUOTA_NAMES`); `snapshots` (stored per
// team, each a full disk copy on its agent) is checked by the snapshot's insert in libSQL.
import { z } from "zod";

export const SANDBOX_QUOTA_NAMES = ["runningSandboxes", "vcpus", "memoryMB", "createsPerMinute", "pausedSandboxes"] as const;
export const QUOTA_NAMES = [...SANDBOX_QUOTA_NAMES, "snapshots"] as const;
export type QuotaName = (typeof QUOTA_NAMES)[number];
/** The limits TeamQuotaDO's ledger counts. */
export type SandboxQuotaName = (typeof SANDBOX_QUOTA_NAMES)[number];

/** Limits by name; null is no limit. */
export type QuotaLimits = Record<QuotaName, number | null>;

const limit = z.int().min(0).max(1_000_000_000).nullable().optional();

/** `PUT /admin/teams/{team}/quota`: replaces the team's own limits (left out: the default). */
export const TeamQuotaUpdate = z.strictObject({
  runningSandboxes: limit,
  vcpus: limit,
  memoryMB: limit,
  createsPerMinute: limit,
  pausedSandboxes: limit,
  snapshots: limit,
});
export type TeamQuotaUpdate = z.infer<typeof TeamQuotaUpdate>;

/** What counts against the ledger's limits right now (the snapshots are counted in libSQL). */
export interface QuotaUsage {
  runningSandboxes: number;
  vcpus: number;
  memoryMB: number;
  createsPerMinute: number;
  /** Paused sandboxes of either strategy (each keeps at least its disk on its agent's host). */
  pausedSandboxes: number;
}

/** The env vars of the defaults, one per limit. */
export const QUOTA_DEFAULT_VARS = {
  runningSandboxes: "QUOTA_RUNNING_SANDBOXES",
  vcpus: "QUOTA_VCPUS",
  memoryMB: "QUOTA_MEMORY_MB",
  createsPerMinute: "QUOTA_CREATES_PER_MINUTE",
  pausedSandboxes: "QUOTA_PAUSED_SANDBOXES",
  snapshots: "QUOTA_SNAPSHOTS",
} as const satisfies Record<QuotaName, string>;

/** The deployment's defaults from its vars: a missing or empty var is no limit; a malformed one throws. */
export function quotaDefaults(vars: Partial<Record<string, unknown>>): QuotaLimits {
  const out = {} as QuotaLimits;
  for (const name of QUOTA_NAMES) {
    const raw = vars[QUOTA_DEFAULT_VARS[name]];
    if (raw === undefined || raw === null || raw === "") out[name] = null;
    else {
      const n = Number(raw);
      if (!Number.isInteger(n) || n < 0) throw new Error(`${QUOTA_DEFAULT_VARS[name]} must be a whole number ≥ 0, got ${JSON.stringify(raw)}`);
      out[name] = n;
    }
  }
  return out;
}
