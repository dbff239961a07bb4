// Durable Object stubs by name, one place for the naming rules of the edge contract.
import type { Env } from "../env.ts";

export function sandboxStub(env: Env, sandboxId: string) {
  return env.SANDBOX.get(env.SANDBOX.idFromName(sandboxId));
}

/** A pool per team + template (the template's owner team, so public templates share a pool). */
export function poolStub(env: Env, teamId: string, templateId: string) {
  return env.POOL.get(env.POOL.idFromName(`${teamId}/${templateId}`));
}
