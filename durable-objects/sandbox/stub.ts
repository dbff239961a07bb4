// How callers reach a sandbox: its group object, and the group's RPCs with the sandbox id bound.
// Lives beside the group so durable-objects/ never imports from functions/.
import { stubOf } from "../object-ids.ts";
import type { Env } from "../env.ts";
import type { SandboxGroupDO } from "./sandbox-group-do.ts";
import { currentTraceparent, leafSpan, spanRecorded, tracingOn } from "../tracing/edge-tracing.ts";

/**
 * The group a sandbox lives in: the first character of its id (ids are random `[a-z0-9]`, so 36
 * groups share the load evenly). Fixed for the lifetime of stored sandboxes: a longer prefix
 * (1,296 groups for two characters) would spread a large deployment wider, but changing it
 * strands every existing sandbox in its old group.
 */
export function sandboxGroupOf(sandboxId: string): string {
  return sandboxId.slice(0, 1);
}

/** `items` split by their sandbox's group (`id`: an item's sandbox id), for one group call each;
 * groups and items keep the order they first came in. */
export function bySandboxGroup<T>(items: Iterable<T>, id: (item: T) => string): T[][] {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const g = sandboxGroupOf(id(item));
    const list = groups.get(g);
    if (list) list.push(item);
    else groups.set(g, [item]);
  }
  return [...groups.values()];
}

const SANDBOX_METHODS = ["create", "info", "kill", "setTimeout", "refresh", "pause", "reservePause", "cancelPause", "connectSandbox", "updateNetwork", "logs", "route", "wake", "inspect", "recordHook", "setHooks", "snapshot"] as const;
type SandboxMethod = (typeof SANDBOX_METHODS)[number];
type WithoutId<F> = F extends (id: string, ...args: infer A) => infer R ? (...args: A) => R : never;

/** One sandbox's RPCs: SandboxGroupDO's methods with the sandbox id filled in. */
export type SandboxHandle = { [M in SandboxMethod]: WithoutId<SandboxGroupDO[M]> };

/** The group object that holds a sandbox (see sandboxGroupOf). */
export function sandboxGroupStub(env: Env, sandboxId: string) {
  return stubOf(env.SANDBOX_GROUP, sandboxGroupOf(sandboxId));
}

/** Methods whose first argument (the caller's Access, or a create's input) carries the trace. */
const TRACED: ReadonlySet<SandboxMethod> = new Set(["create", "info", "kill", "setTimeout", "refresh", "pause", "connectSandbox", "updateNetwork", "logs", "snapshot"]);

/**
 * One sandbox's RPCs as a plain object, not a Durable Object stub: each method calls the
 * sandbox's group (sandboxGroupStub) with the sandbox id bound as its first argument. Traced, a
 * call is a span whose context goes into the call (its first argument's `traceparent`); untraced,
 * the request's id goes in the same way (edge-tracing.ts `currentTraceparent`), for the agent's logs.
 */
export function sandboxHandle(env: Env, sandboxId: string): SandboxHandle {
  const group = sandboxGroupStub(env, sandboxId) as unknown as Record<SandboxMethod, (id: string, ...args: unknown[]) => Promise<unknown>>;
  const traced = tracingOn(env);
  const untraced = (m: SandboxMethod) => (first: object, ...rest: unknown[]) => {
    const traceparent = currentTraceparent();
    return group[m](sandboxId, traceparent ? { ...first, traceparent } : first, ...rest);
  };
  return Object.fromEntries(
    SANDBOX_METHODS.map((m) => {
      if (!TRACED.has(m)) return [m, (...args: unknown[]) => group[m](sandboxId, ...args)];
      const plain = untraced(m);
      if (!traced) return [m, plain];
      // An unsampled request passes its context on as tracing off does: no span attributes or
      // closure built per call only for leafSpan to drop them.
      return [
        m,
        (first: object, ...rest: unknown[]) =>
          spanRecorded(env)
            ? leafSpan(env, `SandboxGroupDO.${m}`, { "sandbox.id": sandboxId }, (traceparent) => group[m](sandboxId, { ...first, traceparent: traceparent() }, ...rest))
            : plain(first, ...rest),
      ];
    }),
  ) as unknown as SandboxHandle;
}
