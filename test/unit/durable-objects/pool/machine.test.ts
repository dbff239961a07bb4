// The warm-pool machine, row by row: (inventory, event) → (inventory, effects, claim reply).
import { describe, expect, it } from "vitest";
import { counts, nextCreateDeadline, transition, type Member, type PoolEvent } from "../../../../durable-objects/pool/machine.ts";
import type { SandboxId } from "../../../../schema/protocol/index.ts";
import { config, ctx, inventory, NOW, obs, pool, summarize, type Setup } from "./fixtures.ts";

interface Row {
  name: string;
  setup: Setup;
  event: PoolEvent;
  now?: number;
  effects: string[];
  inventory?: string[];
  claim?: { id?: string; state?: string; error?: string };
}

const rows: Row[] = [
  {
    name: "configure on an empty pool creates replicas members of the revision",
    setup: { configured: false },
    event: { type: "configure", config: config({ replicas: 3 }) },
    effects: ["save-config", "create:new1(r1)", "create:new2(r1)", "create:new3(r1)"],
  },
  {
    name: "scaleStrategy.maxUnavailable caps how many are creating at once",
    setup: { configured: false },
    event: { type: "configure", config: config({ replicas: 5, scaleMax: 2 }) },
    effects: ["save-config", "create:new1(r1)", "create:new2(r1)"],
  },
  {
    name: "a percentage maxUnavailable rounds up against replicas and counts those creating",
    setup: { replicas: 5, scaleMax: "50%", members: ["c1:c:r1"] },
    event: { type: "tick" },
    effects: ["create:new1(r1)", "create:new2(r1)"],
  },
  {
    name: "claim takes the oldest available member of the current revision and replenishes",
    setup: { replicas: 2, members: ["a:a:r1", "b:a:r1"] },
    event: { type: "claim" },
    effects: ["forget:a", "create:new1(r1)"],
    inventory: ["b:a:r1", "new1:c:r1"],
    claim: { id: "a", state: "available" },
  },
  {
    name: "claim prefers the current revision over an older, longer-waiting one",
    setup: { replicas: 2, revision: "r2", updateMax: 0, members: ["old:a:r1", "cur:a:r2"] },
    event: { type: "claim" },
    effects: ["forget:cur", "create:new1(r2)"],
    claim: { id: "cur", state: "available" },
  },
  {
    name: "claim falls back to another revision when the current one has no stock",
    setup: { replicas: 1, revision: "r2", updateMax: 0, members: ["old:a:r1"] },
    event: { type: "claim" },
    effects: ["forget:old", "create:new1(r2)"],
    claim: { id: "old", state: "available" },
  },
  {
    name: "claim takes a member still creating before minting a new one",
    setup: { replicas: 1, members: ["c1:c:r1"] },
    event: { type: "claim" },
    effects: ["forget:c1", "create:new1(r1)"],
    claim: { id: "c1", state: "creating" },
  },
  {
    name: "with no stock, claim mints a fresh id the caller creates (create-on-no-stock)",
    setup: { replicas: 0 },
    event: { type: "claim" },
    effects: [],
    claim: { id: "new1", state: "new" },
  },
  {
    name: "an unconfigured pool refuses a claim with a typed error",
    setup: { configured: false },
    event: { type: "claim" },
    effects: [],
    claim: { error: "template_not_found" },
  },
  {
    name: "a Running + ready observation makes a creating member available",
    setup: { replicas: 1, members: ["c1:c:r1"] },
    event: { type: "observe", observation: obs("c1", "Running", true) },
    effects: ["update:c1=available"],
    inventory: ["c1:a:r1"],
  },
  {
    name: "an observation of an older generation is dropped",
    setup: { replicas: 1, members: ["c1:c:r1"] },
    event: { type: "observe", observation: obs("c1", "Running", true, 0) },
    effects: [],
    inventory: ["c1:c:r1"],
  },
  {
    name: "an observation of an unknown (e.g. claimed) sandbox is ignored",
    setup: { replicas: 1, members: ["c1:c:r1"] },
    event: { type: "observe", observation: obs("zzz", "Failed", false) },
    effects: [],
  },
  {
    name: "a failed member is deleted at the next generation and replaced",
    setup: { replicas: 1, members: ["c1:c:r1"] },
    event: { type: "observe", observation: obs("c1", "Failed", false) },
    effects: ["delete:c1@2", "create:new1(r1)"],
    inventory: ["new1:c:r1"],
  },
  {
    name: "a member gone from the cluster is forgotten and replaced",
    setup: { replicas: 1, members: ["a:a:r1"] },
    event: { type: "observe", observation: obs("a", "Deleted", false) },
    effects: ["forget:a", "create:new1(r1)"],
  },
  {
    name: "an available member that stops being ready goes back to creating",
    setup: { replicas: 1, members: ["a:a:r1"] },
    event: { type: "observe", observation: obs("a", "Running", false) },
    effects: ["update:a=creating"],
    inventory: ["a:c:r1"],
  },
  {
    name: "scale down removes the oldest members first",
    setup: { replicas: 1, members: ["a:a:r1", "b:a:r1", "c:a:r1"] },
    event: { type: "tick" },
    effects: ["delete:a@2", "delete:b@2"],
    inventory: ["c:a:r1"],
  },
  {
    name: "scale down removes old-revision members, then creating ones, before current available",
    setup: { replicas: 1, revision: "r2", members: ["cur:a:r2", "old:a:r1", "c2:c:r2"] },
    event: { type: "tick" },
    effects: ["delete:old@2", "delete:c2@2"],
    inventory: ["cur:a:r2"],
  },
  {
    name: "a rolling update replaces old available members within updateStrategy.maxUnavailable",
    setup: { replicas: 4, revision: "r2", updateMax: "50%", members: ["a:a:r1", "b:a:r1", "c:a:r1", "d:a:r1"] },
    event: { type: "tick" },
    effects: ["delete:a@2", "delete:b@2", "create:new1(r2)", "create:new2(r2)"],
    inventory: ["c:a:r1", "d:a:r1", "new1:c:r2", "new2:c:r2"],
  },
  {
    name: "the update budget counts updated members still creating",
    setup: { replicas: 3, revision: "r2", updateMax: 2, members: ["a:a:r1", "b:a:r1", "n:c:r2"] },
    event: { type: "tick" },
    effects: ["delete:a@2", "create:new1(r2)"],
  },
  {
    name: "old-revision creating members are replaced regardless of the budget",
    setup: { replicas: 2, revision: "r2", updateMax: 0, members: ["x:c:r1", "y:c:r1"] },
    event: { type: "tick" },
    effects: ["delete:x@2", "delete:y@2", "create:new1(r2)", "create:new2(r2)"],
  },
  {
    name: "a member creating for longer than the timeout is replaced",
    setup: { replicas: 1, members: ["slow:c:r1"] },
    now: NOW + 120_000,
    event: { type: "tick" },
    effects: ["delete:slow@2", "create:new1(r1)"],
  },
  {
    name: "destroy deletes every unclaimed member and forgets the spec",
    setup: { replicas: 2, members: ["a:a:r1", "c1:c:r1"] },
    event: { type: "destroy" },
    effects: ["delete:a@2", "delete:c1@2", "save-config"],
    inventory: [],
  },
];

describe("pool machine", () => {
  it.each(rows)("$name", (row) => {
    const st = pool(row.setup);
    const out = transition(st, row.event, ctx(row.now));
    expect(summarize(out.effects)).toEqual(row.effects);
    if (row.inventory) expect(inventory(out.state)).toEqual([...row.inventory].sort());
    if (row.claim) {
      const c = out.claim;
      if (row.claim.error) expect(c).toMatchObject({ ok: false, error: { code: row.claim.error } });
      else expect(c).toMatchObject({ ok: true, state: row.claim.state, member: { id: row.claim.id } });
    }
  });

  it("a member ready once that stops being ready (as after an agent restart) is timed from then, not from its creation", () => {
    const st = pool({ replicas: 1, members: ["a:a:r1"] });
    const later = { now: NOW + 10 * 60_000, newId: () => "n1" as SandboxId, createTimeoutMs: 60_000 };
    transition(st, { type: "observe", observation: obs("a", "Running", false) }, later);
    expect(transition(st, { type: "tick" }, later).effects).toEqual([]);
    expect(nextCreateDeadline(st, 60_000)).toBe(later.now + 60_000);
    // Still not ready a whole timeout later: replaced.
    const after = { ...later, now: later.now + 60_000 };
    expect(transition(st, { type: "tick" }, after).effects.map((e) => e.type)).toEqual(["delete", "create"]);
  });

  it("a creating member's timeout alarm that runs with the clock just short of it still replaces the member", () => {
    const st = pool({ replicas: 1, members: ["c1:c:r1"] });
    const at = (now: number) => ({ now, newId: () => "n1" as SandboxId, createTimeoutMs: 60_000 });
    const due = nextCreateDeadline(st, 60_000)!;
    expect(summarize(transition(st, { type: "tick" }, at(due - 5_000)).effects)).toEqual([]);
    expect(summarize(transition(st, { type: "tick" }, at(due - 1)).effects)).toEqual(["delete:c1@2", "create:n1(r1)"]);
  });

  it("members the cluster refuses (a template it will never run): one at a time, backing off, until one is ready or the template changes", () => {
    const st = pool({ replicas: 3, members: ["c1:c:r1", "c2:c:r1", "c3:c:r1"] });
    let ids = 0;
    const at = (now: number) => ({ now, newId: () => `n${++ids}` as SandboxId, createTimeoutMs: 60_000 });
    const refused = (id: string, now: number) => summarize(transition(st, { type: "observe", observation: { ...obs(id, "Failed", false), reason: "UnsafePodSpec", message: "hostNetwork" } }, at(now)).effects);
    // The others are still creating: no new member while one of the revision is.
    expect(refused("c1", NOW)).toEqual(["delete:c1@2"]);
    expect(refused("c2", NOW)).toEqual(["delete:c2@2"]);
    expect(refused("c3", NOW)).toEqual(["delete:c3@2"]);
    expect(st.failing).toEqual({ revision: "r1", reason: "UnsafePodSpec", message: "hostNetwork", failures: 3, retryAt: NOW + 2_000 });
    // Empty, and nothing is made before the backoff ends; the alarm is set for it.
    expect(summarize(transition(st, { type: "tick" }, at(NOW + 500)).effects)).toEqual([]);
    expect(nextCreateDeadline(st, 60_000)).toBe(NOW + 2_000);
    // The alarm set for it may run with the object's clock just short of it: judged as of its time.
    expect(summarize(transition(st, { type: "tick" }, at(NOW + 1_999)).effects)).toEqual(["create:n1(r1)"]);
    // Then the alarm waits for that member's timeout, not for the retry time just passed (a re-arm
    // for the time of the alarm running is dropped).
    expect(nextCreateDeadline(st, 60_000)).toBe(NOW + 2_000 + 60_000);
    expect(summarize(transition(st, { type: "tick" }, at(NOW + 2_001)).effects)).toEqual([]);
    // Refused again: the wait doubles.
    expect(refused("n1", NOW + 3_000)).toEqual(["delete:n1@2"]);
    expect(st.failing).toMatchObject({ failures: 4, retryAt: NOW + 3_000 + 4_000 });
    expect(summarize(transition(st, { type: "tick" }, at(NOW + 7_000)).effects)).toEqual(["create:n2(r1)"]);
    // One ready member ends it: the pool fills at once.
    expect(summarize(transition(st, { type: "observe", observation: obs("n2", "Running", true) }, at(NOW + 8_000)).effects)).toEqual(["update:n2=available", "create:n3(r1)", "create:n4(r1)"]);
    expect(st.failing).toBeUndefined();

    // A new template after refusals: tried at once, whole.
    const st2 = pool({ replicas: 2, members: ["a1:c:r1", "a2:c:r1"] });
    for (const id of ["a1", "a2"]) transition(st2, { type: "observe", observation: obs(id, "Failed", false) }, at(NOW));
    expect(st2.failing).toMatchObject({ failures: 2 });
    expect(summarize(transition(st2, { type: "configure", config: config({ replicas: 2, revision: "r2" }) }, ctx()).effects)).toEqual(["save-config", "create:new1(r2)", "create:new2(r2)"]);
    expect(st2.failing).toBeUndefined();
    // An old revision's refusal says nothing of the current template.
    const st3 = pool({ replicas: 1, revision: "r2", updateMax: 0, members: ["old:c:r1"] });
    transition(st3, { type: "observe", observation: obs("old", "Failed", false) }, at(NOW));
    expect(st3.failing).toBeUndefined();
  });

  it("never hands out a member twice and keeps its counts consistent under a long mixed run", () => {
    const st = pool({ replicas: 20, scaleMax: 8, members: [] });
    let seed = 7;
    const rand = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    const claimed = new Set<string>();
    let ids = 0;
    const c = { now: NOW, newId: () => `m${++ids}` as SandboxId };
    transition(st, { type: "tick" }, c);
    for (let i = 0; i < 5_000; i++) {
      const r = rand();
      if (r < 0.4) {
        const out = transition(st, { type: "claim" }, c);
        const m = out.claim?.ok ? out.claim.member : null;
        expect(m).not.toBeNull();
        expect(claimed.has(m!.id)).toBe(false);
        claimed.add(m!.id);
        expect(st.members.has(m!.id)).toBe(false);
      } else {
        const members = [...st.members.values()];
        const m = members[Math.floor(rand() * members.length)];
        if (!m) continue;
        const phase = r < 0.9 ? "Running" : r < 0.95 ? "Failed" : "Deleted";
        transition(st, { type: "observe", observation: obs(m.id, phase, rand() < 0.9, m.generation) }, c);
      }
      const n = counts(st);
      expect(n.available + n.creating).toBe(st.members.size);
      // Full, or short only because the scale-up budget (8 creating) is used up, or because a
      // member was refused and no member has been ready since (one at a time, backing off).
      expect(st.members.size).toBeLessThanOrEqual(20);
      if (st.members.size < 20 && !st.failing) expect(n.creating).toBeGreaterThanOrEqual(8);
    }
  });

  it("claims stay first-in first-out across thousands of members becoming available", () => {
    const st = pool({ replicas: 3_000 });
    const c = ctx();
    const created = transition(st, { type: "tick" }, c).effects.flatMap((e) => (e.type === "create" ? e.members : []));
    const readyOrder: Member[] = [...created].reverse();
    for (const m of readyOrder) transition(st, { type: "observe", observation: obs(m.id, "Running", true) }, c);
    const firstThree = [0, 1, 2].map(() => {
      const out = transition(st, { type: "claim" }, c);
      return out.claim?.ok ? out.claim.member.id : null;
    });
    expect(firstThree).toEqual(readyOrder.slice(0, 3).map((m) => m.id));
  });
});
