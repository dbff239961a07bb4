// Durable Object stubs by name, one place for the naming rules of the edge contract.
import { sandboxGroupOf, type SandboxGroupDO } from "../../durable-objects/sandbox/sandbox-group-do.ts";
import type { Env } from "../env.ts";

const SANDBOX_METHODS = ["create", "info", "kill", "setTimeout", "refresh", "pause", "connectSandbox", "route", "wake", "inspect"] as const;
type SandboxMethod = (typeof SANDBOX_METHODS)[number];
type WithoutId<F> = F extends (id: string, ...args: infer A) => infer R ? (...args: A) => R : never;

/** One sandbox's RPCs: SandboxGroupDO's methods with the sandbox id filled in. */
export type SandboxHandle = { [M in SandboxMethod]: WithoutId<SandboxGroupDO[M]> };

/** The group object that holds a sandbox (see sandboxGroupOf). */
export function sandboxGroupStub(env: Env, sandboxId: string) {
  return env.SANDBOX_GROUP.get(env.SANDBOX_GROUP.idFromName(sandboxGroupOf(sandboxId)));
}

export function sandboxStub(env: Env, sandboxId: string): SandboxHandle {
  const group = sandboxGroupStub(env, sandboxId) as unknown as Record<SandboxMethod, (id: string, ...args: unknown[]) => unknown>;
  return Object.fromEntries(SANDBOX_METHODS.map((m) => [m, (...args: unknown[]) => group[m](sandboxId, ...args)])) as SandboxHandle;
}

/** A pool per team + template (the template's owner team, so public templates share a pool). */
export function poolStub(env: Env, teamId: string, templateId: string) {
  return env.POOL.get(env.POOL.idFromName(`${teamId}/${templateId}`));
}
