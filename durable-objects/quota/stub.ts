// How callers reach a team's quota: one TeamQuotaDO per team.
import { stubOf } from "../object-ids.ts";
import type { Env } from "../env.ts";

/** The quota of a team (the caller's: a public template's sandboxes count for the team using it). */
export function quotaStub(env: Env, teamId: string) {
  return stubOf(env.TEAM_QUOTA, teamId);
}
