// The pool's rolling update, edge by edge: the maxUnavailable arithmetic, what counts as
// unavailable (creating and failed members, old ones included), a revision changing mid-rollout,
// claims during a rollout, and the status it reports (openkruise-agents.md §1.2, §2.2 step 5).
import { describe, expect, it } from "vitest";
import { rollout, scaled, transition, type PoolEvent, type PoolState } from "../../../../durable-objects/pool/machine.ts";
import type { SandboxId } from "../../../../schema/protocol/index.ts";
import { config, ctx, inventory, obs, pool, summarize, type IntOrPercent, type Setup } from "./fixtures.ts";

describe("maxUnavailable against replicas", () => {
  it.each([
    { value: 3, replicas: 10, budget: 3 },
    { value: "20%", replicas: 10, budget: 2 },
    { value: "25%", replicas: 10, budget: 3 }, // 2.5 rounds up
    { value: "30%", replicas: 5, budget: 2 }, // 1.5 rounds up
    { value: "1%", replicas: 10, budget: 1 }, // a non-zero percentage of a non-empty pool allows one
    { value: "0%", replicas: 10, budget: 0 },
    { value: 0, replicas: 10, budget: 0 },
    { value: "100%", replicas: 3, budget: 3 },
    { value: 15, replicas: 10, budget: 15 }, // more than replicas: every old member at once
    { value: "50%", replicas: 0, budget: 0 },
  ])("$value of $replicas replicas allows $budget", ({ value, replicas, budget }) => {
    expect(scaled(value, replicas)).toBe(budget);
  });
});

interface Row {
  name: string;
  setup: Setup;
  event: PoolEvent;
  effects: string[];
  inventory?: string[];
  claim?: string;
}

const r2 = (replicas: number, updateMax: IntOrPercent, members: string[]): Setup => ({ replicas, revision: "r2", updateMax, members });
const old4 = ["a:a:r1", "b:a:r1", "c:a:r1", "d:a:r1"];

const rows: Row[] = [
  {
    name: "a number: that many old available members are replaced at once",
    setup: r2(4, 1, old4),
    event: { type: "tick" },
    effects: ["delete:a@2", "create:new1(r2)"],
  },
  {
    name: "a percentage rounds up: 30% of 5 replaces 2",
    setup: r2(5, "30%", [...old4, "e:a:r1"]),
    event: { type: "tick" },
    effects: ["delete:a@2", "delete:b@2", "create:new1(r2)", "create:new2(r2)"],
  },
  {
    name: "0 replaces no available member (old ones leave only by claims)",
    setup: r2(4, 0, old4),
    event: { type: "tick" },
    effects: [],
  },
  {
    name: "more than replicas replaces every old member at once",
    setup: r2(4, 10, old4),
    event: { type: "tick" },
    effects: ["delete:a@2", "delete:b@2", "delete:c@2", "delete:d@2", "create:new1(r2)", "create:new2(r2)", "create:new3(r2)", "create:new4(r2)"],
  },
  {
    name: "updated members still creating use the budget",
    setup: r2(4, 2, ["a:a:r1", "b:a:r1", "c:a:r1", "n:c:r2"]),
    event: { type: "tick" },
    effects: ["delete:a@2", "create:new1(r2)"],
  },
  {
    name: "old members still creating use the budget too (their replacements will be creating)",
    setup: r2(4, 2, ["a:a:r1", "b:a:r1", "c:a:r1", "x:c:r1"]),
    event: { type: "tick" },
    effects: ["delete:x@2", "delete:a@2", "create:new1(r2)", "create:new2(r2)"],
    inventory: ["b:a:r1", "c:a:r1", "new1:c:r2", "new2:c:r2"],
  },
  {
    name: "an old member that stops being ready uses the whole budget of 1, and is kept (it may recover)",
    setup: r2(4, 1, old4),
    event: { type: "observe", observation: obs("a", "Running", false) },
    effects: ["update:a=creating"],
    inventory: ["a:c:r1", "b:a:r1", "c:a:r1", "d:a:r1"],
  },
  {
    name: "with budget left, an old member that stopped being ready is replaced before a ready one",
    setup: r2(4, 2, old4),
    event: { type: "observe", observation: obs("b", "Running", false) },
    effects: ["update:b=creating", "delete:b@2", "create:new1(r2)"],
    inventory: ["a:a:r1", "c:a:r1", "d:a:r1", "new1:c:r2"],
  },
  {
    name: "an old member that stopped being ready is not replaced outside the budget",
    setup: r2(4, 1, ["a:u:r1", "b:a:r1", "c:a:r1", "d:a:r1"]),
    event: { type: "tick" },
    effects: [],
  },
  {
    name: "an old member that recovers is counted available again, and the rollout goes on",
    setup: r2(4, 1, ["a:u:r1", "b:a:r1", "c:a:r1", "d:a:r1"]),
    event: { type: "observe", observation: obs("a", "Running", true) },
    effects: ["update:a=available", "delete:b@2", "create:new1(r2)"],
  },
  {
    name: "a failed replacement is replaced, and no further old member goes while it creates",
    setup: r2(3, 1, ["a:a:r1", "b:a:r1", "n:c:r2"]),
    event: { type: "observe", observation: obs("n", "Failed", false) },
    effects: ["delete:n@2", "create:new1(r2)"],
    inventory: ["a:a:r1", "b:a:r1", "new1:c:r2"],
  },
  {
    name: "a replacement becoming ready frees the budget for the next old member",
    setup: r2(3, 1, ["a:a:r1", "b:a:r1", "n:c:r2"]),
    event: { type: "observe", observation: obs("n", "Running", true) },
    effects: ["update:n=available", "delete:a@2", "create:new1(r2)"],
  },
  {
    name: "a revision change mid-rollout: members of the half-done revision are old too",
    setup: { replicas: 3, revision: "r3", updateMax: 1, members: ["a:a:r1", "b:a:r2", "c:c:r2"] },
    event: { type: "tick" },
    effects: ["delete:c@2", "create:new1(r3)"],
    inventory: ["a:a:r1", "b:a:r2", "new1:c:r3"],
  },
  {
    name: "a claim takes a current member still creating over an old available one",
    setup: r2(2, 0, ["old:a:r1", "cur:c:r2"]),
    event: { type: "claim" },
    effects: ["forget:cur", "create:new1(r2)"],
    claim: "cur",
  },
  {
    name: "a claim takes an old member only when no current one exists",
    setup: r2(2, 0, ["old:c:r1", "older:a:r1"]),
    event: { type: "claim" },
    effects: ["forget:older", "create:new1(r2)"],
    claim: "older",
  },
];

describe("rolling update", () => {
  it.each(rows)("$name", (row) => {
    const st = pool(row.setup);
    const out = transition(st, row.event, ctx());
    expect(summarize(out.effects)).toEqual(row.effects);
    if (row.inventory) expect(inventory(out.state)).toEqual([...row.inventory].sort());
    if (row.claim) expect(out.claim).toMatchObject({ ok: true, member: { id: row.claim } });
  });

  it("reports the oldest member's revision as current until the last old member is gone", () => {
    const st = pool(r2(3, 1, ["a:a:r1", "b:a:r2", "n:c:r2"]));
    expect(rollout(st)).toEqual({ updateRevision: "r2", currentRevision: "r1", updatedReplicas: 2, updatedAvailableReplicas: 1, maxUnavailable: 1 });
    transition(st, { type: "observe", observation: obs("n", "Running", true) }, ctx());
    expect(rollout(st)).toMatchObject({ currentRevision: "r2", updatedReplicas: 3, updatedAvailableReplicas: 2 });
  });

  it("drives a whole rollout, with a second revision mid-way: never more than maxUnavailable unavailable", () => {
    const replicas = 10;
    const st = pool({ replicas, members: Array.from({ length: replicas }, (_, i) => `m${i}:a:r1`) });
    let ids = 0;
    const c = { now: 0, newId: () => `n${++ids}` as SandboxId };
    const unavailable = (s: PoolState) => replicas - [...s.members.values()].filter((m) => m.state === "available").length;
    const configure = (revision: string) => transition(st, { type: "configure", config: config({ replicas, revision, updateMax: "20%" }) }, c);
    /** The agent makes one creating member ready per step, oldest first. */
    const step = () => {
      const m = [...st.members.values()].find((x) => x.state === "creating");
      if (m) transition(st, { type: "observe", observation: obs(m.id, "Running", true, m.generation) }, c);
      return m !== undefined;
    };
    configure("r2");
    for (let i = 0; i < 6; i++) {
      expect(unavailable(st)).toBeLessThanOrEqual(2);
      step();
    }
    expect(rollout(st)).toMatchObject({ updateRevision: "r2", currentRevision: "r1" });
    configure("r3");
    let steps = 0;
    while (step()) {
      expect(unavailable(st)).toBeLessThanOrEqual(2);
      expect(st.members.size).toBe(replicas);
      expect(++steps).toBeLessThan(100);
    }
    expect(inventory(st).every((m) => m.endsWith(":a:r3"))).toBe(true);
    expect(rollout(st)).toEqual({ updateRevision: "r3", currentRevision: "r3", updatedReplicas: replicas, updatedAvailableReplicas: replicas, maxUnavailable: 2 });
  });
});
