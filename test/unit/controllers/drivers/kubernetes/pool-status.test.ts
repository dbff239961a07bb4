// The SandboxSet's ReplicaFailure condition, pure (no API server): when it became True, and which
// refusals a flush keeps (none for a set that is gone or deleting).
import { describe, expect, it } from "vitest";
import type { SandboxObject, SandboxSetObject } from "../../../../../controllers/drivers/kubernetes/objects.ts";
import { poolConditions, poolFlush, poolRevision, REPLICA_FAILURE, type PoolRefusal } from "../../../../../controllers/drivers/kubernetes/pool-status.ts";

type Status = { conditions?: { type: string; status: string; lastTransitionTime?: string }[] };
const set = (status?: Status, deleting = false): SandboxSetObject =>
  ({
    metadata: { name: "s", generation: 1, ...(deleting ? { deletionTimestamp: new Date("2026-01-01T00:00:00Z") } : {}) },
    spec: { replicas: 2, template: { spec: { containers: [{ name: "main", image: "python:3.13" }] } } },
    ...(status ? { status } : {}),
  }) as never;
const rev = poolRevision(set());
const refusal = (at: string, message = "hostNetwork"): PoolRefusal => ({ revision: rev, reason: "UnsafePodSpec", message, at });
const none: SandboxObject[] = [];

describe("ReplicaFailure", () => {
  it("keeps the time it became True while it stays True; a later refusal moves only the message", () => {
    const first = poolConditions(set(), none, refusal("2026-01-01T00:00:00Z"), undefined)!;
    expect(first).toEqual([{ type: REPLICA_FAILURE, status: "True", reason: "UnsafePodSpec", message: `members of revision ${rev} are refused: hostNetwork`, lastTransitionTime: "2026-01-01T00:00:00Z" }]);
    const again = poolConditions(set({ conditions: first }), none, refusal("2026-01-01T00:05:00Z", "hostPID"), first)!;
    expect(again[0]).toMatchObject({ status: "True", message: expect.stringContaining("hostPID"), lastTransitionTime: "2026-01-01T00:00:00Z" });
    // The same refusal again: nothing to patch.
    const shown = set({ ...poolFlush(set(), none, refusal("2026-01-01T00:00:00Z")).status! });
    expect(poolFlush(shown, none, refusal("2026-01-01T00:09:00Z"))).toEqual({ status: null, keepRefusal: true });
  });

  it("a flush of a set that is gone or deleting drops its refusal, so a set re-created under that name starts clean", () => {
    expect(poolFlush(undefined, none, refusal("2026-01-01T00:00:00Z"))).toEqual({ status: null, keepRefusal: false });
    expect(poolFlush(set(undefined, true), none, refusal("2026-01-01T00:00:00Z"))).toEqual({ status: null, keepRefusal: false });
    expect(poolFlush(set(), none, undefined).status?.conditions).toBeUndefined();
  });

  it("a ready member of the revision resolves it: the condition goes and the refusal is forgotten", () => {
    const shown = set(poolFlush(set(), none, refusal("2026-01-01T00:00:00Z")).status!);
    const ready = { metadata: { name: "m", labels: { "agents.kruise.io/sandbox-pool": "s", "agents.kruise.io/sandbox-claimed": "false", "agents.kruise.io/template-hash": rev } }, spec: {}, status: { conditions: [{ type: "Ready", status: "True" }] } } as never as SandboxObject;
    const out = poolFlush(shown, [ready], refusal("2026-01-01T00:00:00Z"));
    expect(out.keepRefusal).toBe(false);
    expect(out.status?.conditions).toEqual([]);
  });
});
