// Durable Object stubs by name, one place for the naming rules of the edge contract. A sandbox's
// stubs live beside its group (durable-objects/sandbox/stub.ts) and are re-exported here.
import type { Access } from "../../durable-objects/sandbox/state.ts";
import type { Caller, Env } from "../env.ts";

export { sandboxGroupOf, sandboxGroupStub, sandboxStub, type SandboxHandle } from "../../durable-objects/sandbox/stub.ts";

/** A pool per team + template (the template's owner team, so public templates share a pool). */
export function poolName(teamId: string, templateId: string): string {
  return `${teamId}/${templateId}`;
}

export function poolStub(env: Env, teamId: string, templateId: string) {
  return env.POOL.get(env.POOL.idFromName(poolName(teamId, templateId)));
}

/** The quota of a team (the caller's: a public template's sandboxes count for the team using it). */
export function quotaStub(env: Env, teamId: string) {
  return env.TEAM_QUOTA.get(env.TEAM_QUOTA.idFromName(teamId));
}

/** What a caller may reach: its team's sandboxes (whichever key created them), or all for the admin. */
export function accessOf(caller: Caller): Access {
  return { teamId: caller.teamId, admin: caller.admin };
}
