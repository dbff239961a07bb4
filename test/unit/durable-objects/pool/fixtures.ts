// Fixtures of the pool machine's table tests: a pool from a short description, effects and
// inventory as short strings.
import { addMember, initialState, type PoolEffect, type PoolState } from "../../../../durable-objects/pool/machine.ts";
import type { PoolConfig } from "../../../../durable-objects/pool/rpc.ts";
import { TemplateSpec } from "../../../../schema/api/template.ts";
import type { Observation, SandboxId } from "../../../../schema/protocol/index.ts";

export const NOW = 1_000_000;

export type IntOrPercent = number | `${number}%`;

export interface Setup {
  replicas?: number;
  revision?: string;
  scaleMax?: IntOrPercent;
  updateMax?: IntOrPercent;
  /** Members oldest first, as `id:state:revision` (state a = available, c = creating, u = creating
   * again after having been available). */
  members?: string[];
  configured?: boolean;
}

export function config(s: Setup): PoolConfig {
  const spec = TemplateSpec.parse({
    replicas: s.replicas ?? 0,
    scaleStrategy: s.scaleMax === undefined ? {} : { maxUnavailable: s.scaleMax },
    updateStrategy: { maxUnavailable: s.updateMax ?? "20%" },
  });
  return { teamId: "t1", templateId: "base", revision: s.revision ?? "r1", spec };
}

export function pool(s: Setup): PoolState {
  const st = initialState();
  if (s.configured !== false) st.config = { ...config(s), cluster: "local" };
  for (const [i, desc] of (s.members ?? []).entries()) {
    const [id, state, revision] = desc.split(":") as [string, string, string];
    addMember(st, { id: id as SandboxId, state: state === "a" ? "available" : "creating", revision, generation: 1, createdAt: NOW - 1000 + i, endpoint: null, readyOnce: state !== "c", slot: -1 });
  }
  return st;
}

export function ctx(now = NOW) {
  let n = 0;
  return { now, newId: () => `new${++n}` as SandboxId, createTimeoutMs: 60_000 };
}

/** Effects as short strings: `create:new1(r1)`, `delete:a@2`, `forget:a`, `update:a=available`. */
export function summarize(effects: PoolEffect[]): string[] {
  return effects.flatMap((e): string[] => {
    switch (e.type) {
      case "create":
        return e.members.map((m) => `create:${m.id}(${m.revision})`);
      case "delete":
        return e.members.map((m) => `delete:${m.id}@${m.generation}`);
      case "forget":
        return e.ids.map((id) => `forget:${id}`);
      case "update":
        return [`update:${e.member.id}=${e.member.state}`];
      case "save-config":
        return ["save-config"];
    }
  });
}

/** Unclaimed members by state, in queue order, as `id:state:revision`. */
export function inventory(st: PoolState): string[] {
  return [...st.members.values()].map((m) => `${m.id}:${m.state === "available" ? "a" : "c"}:${m.revision}`).sort();
}

export function obs(id: string, phase: Observation["phase"], ready: boolean, generation = 1): Observation {
  return { sandboxId: id as SandboxId, generation, phase, ready, endpoint: ready ? { runtime: `http://${id}` } : null, observedAt: NOW };
}

