// Durable Object stubs by name, one place for the naming rules of the edge contract. A sandbox's
// stubs live beside its group (durable-objects/sandbox/stub.ts) and are re-exported here.
import type { Env } from "../env.ts";

export { sandboxGroupOf, sandboxGroupStub, sandboxStub, type SandboxHandle } from "../../durable-objects/sandbox/stub.ts";

/** A pool per team + template (the template's owner team, so public templates share a pool). */
export function poolStub(env: Env, teamId: string, templateId: string) {
  return env.POOL.get(env.POOL.idFromName(`${teamId}/${templateId}`));
}
