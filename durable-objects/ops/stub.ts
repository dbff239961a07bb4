// How callers reach an update ops run: one UpdateOpsDO per team + name.
import type { Env } from "../env.ts";

export function opsStub(env: Env, teamId: string, name: string) {
  return env.UPDATE_OPS.get(env.UPDATE_OPS.idFromName(`${teamId}/${name}`));
}
