// How callers reach a pool: one PoolDO per team + template.
import { stubOf } from "../object-ids.ts";
import type { Env } from "../env.ts";

/** A pool per team + template (the template's owner team, so public templates share a pool). */
export function poolName(teamId: string, templateId: string): string {
  return `${teamId}/${templateId}`;
}

export function poolStub(env: Env, teamId: string, templateId: string) {
  return stubOf(env.POOL, poolName(teamId, templateId));
}
