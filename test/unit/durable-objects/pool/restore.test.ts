// A reloaded pool (machine.ts `restore`): its stored available members are read a page at a time
// as claims, scale-downs, rollouts and observations reach them, in their stored order and ahead of
// members queued after the load; counts include the members not read yet.
import { describe, expect, it } from "vitest";
import { counts, initialState, readMembers, restore, rollout, STORED_PAGE, transition, type Member, type MemberSource, type PoolState } from "../../../../durable-objects/pool/machine.ts";
import type { SandboxId } from "../../../../schema/protocol/index.ts";
import { config, ctx, obs, summarize } from "./fixtures.ts";

function row(id: string, slot: number, revision = "r1", state: Member["state"] = "available"): Member {
  return { id: id as SandboxId, state, revision, generation: 1, createdAt: slot, endpoint: null, readyOnce: state === "available", slot };
}

/** A pool reloaded from `rows` (stored tickets = their order), counting the rows it reads. */
function reloaded(rows: Member[], replicas: number, revision = "r1") {
  const stored = new Map<string, Member>(rows.map((r) => [r.id, r]));
  const reads = { rows: 0 };
  const source: MemberSource = {
    availablePage: (rev, after, before, limit) => {
      const page = [...stored.values()].filter((r) => r.state === "available" && r.revision === rev && r.slot > after && r.slot < before).sort((a, b) => a.slot - b.slot).slice(0, limit);
      reads.rows += page.length;
      return page.map((r) => ({ ...r }));
    },
    members: (wanted) => {
      const found = wanted.flatMap((id) => {
        const r = stored.get(id);
        return r ? [{ ...r }] : [];
      });
      reads.rows += found.length;
      return found;
    },
  };
  const st = initialState();
  st.config = { ...config({ replicas, revision }), cluster: "local" };
  const available = new Map<string, number>();
  for (const r of rows) if (r.state === "available") available.set(r.revision, (available.get(r.revision) ?? 0) + 1);
  restore(st, {
    creating: rows.filter((r) => r.state === "creating").map((r) => ({ ...r })),
    available: [...available].map(([rev, size]) => ({ revision: rev, size })),
    nextSlot: rows.length,
  }, source);
  return { st, reads, forget: (id: string) => stored.delete(id) };
}

function claimIds(st: PoolState, n: number, c = ctx()): string[] {
  return Array.from({ length: n }, () => {
    const out = transition(st, { type: "claim" }, c);
    return out.claim?.ok ? out.claim.member.id : "";
  });
}

const ids = (n: number, prefix = "m") => Array.from({ length: n }, (_, i) => `${prefix}${i}`);

describe("pool restore", () => {
  it("counts every stored member and reads one page for the first claim, oldest first", () => {
    const { st, reads } = reloaded(ids(1_000).map((id, i) => row(id, i)), 1_000);
    expect(reads.rows).toBe(0);
    expect(counts(st)).toMatchObject({ available: 1_000, creating: 0 });
    expect(st.total).toBe(1_000);
    expect(claimIds(st, 1)).toEqual(["m0"]);
    expect(reads.rows).toBe(STORED_PAGE);
    expect(counts(st)).toMatchObject({ available: 999, creating: 1 });
  });

  it("claims go through the stored members in order, then members that became available after the load", () => {
    const rows = [...ids(150).map((id, i) => row(id, i)), row("c0", 150, "r1", "creating")];
    const { st } = reloaded(rows, 151);
    // c0 becomes available after the load: it queues behind all 150 stored members.
    transition(st, { type: "observe", observation: obs("c0", "Running", true) }, ctx());
    expect(claimIds(st, 151)).toEqual([...ids(150), "c0"]);
  });

  it("an observation reads an unread member by id; a member gone or moved before its page is read is skipped", () => {
    const { st, forget } = reloaded(ids(200).map((id, i) => row(id, i)), 200);
    const c = ctx();
    transition(st, { type: "observe", observation: obs("m150", "Deleted", false) }, c);
    forget("m150"); // the shell writes the effect
    transition(st, { type: "observe", observation: obs("m160", "Running", false) }, c);
    expect(counts(st)).toMatchObject({ available: 198, creating: 2 });
    const claimed = claimIds(st, 198, c);
    expect(claimed).toEqual(ids(200).filter((id) => id !== "m150" && id !== "m160"));
    expect(new Set(claimIds(st, 2, c))).toEqual(new Set(["m160", "new1"]));
  });

  it("a batch naming most unread members (an agent's hello) reads the stock in order; a small one only what it names", () => {
    const { st, reads } = reloaded(ids(1_000).map((id, i) => row(id, i)), 1_000);
    readMembers(st, ["m10", "m500", "nobody"]);
    expect(reads.rows).toBe(2);
    readMembers(st, ids(600));
    expect(st.members.size).toBe(1_000);
    expect(claimIds(st, 3)).toEqual(["m0", "m1", "m2"]);
    expect(counts(st)).toMatchObject({ available: 997 });
  });

  it("scale-down, rollout and destroy reach members not read yet", () => {
    const rows = [...ids(100, "old").map((id, i) => row(id, i)), ...ids(100, "cur").map((id, i) => row(id, 100 + i, "r2"))];
    const { st } = reloaded(rows, 200, "r2");
    expect(rollout(st)).toMatchObject({ currentRevision: "r1", updatedAvailableReplicas: 100 });
    const down = transition(st, { type: "configure", config: config({ replicas: 150, revision: "r2", updateMax: 0 }) }, ctx());
    expect(summarize(down.effects).filter((e) => e.startsWith("delete"))).toEqual(ids(50, "old").map((id) => `delete:${id}@2`));
    expect(st.total).toBe(150);
    const gone = transition(st, { type: "destroy" }, ctx());
    expect(summarize(gone.effects).filter((e) => e.startsWith("delete"))).toHaveLength(150);
    expect(st.total).toBe(0);
    expect(counts(st)).toMatchObject({ available: 0, creating: 0 });
  });
});
