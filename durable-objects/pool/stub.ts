// How callers reach a pool: one PoolDO per team + template.
import type { Env } from "../env.ts";

/** A pool per team + template (the template's owner team, so public templates share a pool). */
export function poolName(teamId: string, templateId: string): string {
  return `${teamId}/${templateId}`;
}

export function poolStub(env: Env, teamId: string, templateId: string) {
  return env.POOL.get(env.POOL.idFromName(poolName(teamId, templateId)));
}
