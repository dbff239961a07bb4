// The index outbox's wake-ups (sandbox/index-outbox.ts): an op the index has not confirmed must
// always have the group's alarm armed for it, soon, however its sends and the alarm interleave. A
// wake-up lost here leaves a sandbox the client was told about out of the list until its group's
// next unrelated alarm (its end of life, minutes away), however long ago the store came back.
import { describe, expect, it } from "vitest";
import { IndexOutbox } from "../../../../durable-objects/sandbox/index-outbox.ts";
import type { IndexQueue } from "../../../../durable-objects/sandbox/index-queue.ts";
import type { OutboxEntry } from "../../../../durable-objects/sandbox/store.ts";
import type { IndexOp, IndexRow } from "../../../../durable-objects/store/sandbox-index.ts";

/** The outbox's longest backoff (index-outbox.ts MAX_RETRY_MS): "soon". */
const SOON_MS = 4_000;

const op = (id: string, rev = 1): IndexOp => ({ kind: "upsert", row: { id, rev } as IndexRow });

/** A group around the outbox: its stored outbox, its one alarm, and index writes answered by hand. */
function group() {
  const rows = new Map<string, OutboxEntry>();
  const store = {
    outboxPut: (e: OutboxEntry) => {
      if ((rows.get(e.id)?.rev ?? -1) < e.rev) rows.set(e.id, e);
    },
    outboxDone: (id: string, rev: number) => {
      if ((rows.get(id)?.rev ?? Infinity) <= rev) rows.delete(id);
    },
    outbox: (limit: number) => [...rows.values()].slice(0, limit),
  };
  /** Index writes in flight, oldest first: answer one with `answer`. */
  const writes: { op: IndexOp; done: (committed: boolean) => void }[] = [];
  const queue = { push: (o: IndexOp) => new Promise<boolean>((done) => writes.push({ op: o, done })) } as unknown as IndexQueue;
  /** The alarm as storage keeps it: the earliest time asked for since it last fired. */
  let alarm: number | null = null;
  const background: Promise<unknown>[] = [];
  const outbox = new IndexOutbox(store, queue, (w) => w(), (at) => {
    if (alarm === null || at < alarm) alarm = at;
  });
  const settle = () => new Promise((r) => setTimeout(r, 0));
  return {
    outbox,
    rows,
    writes,
    alarm: () => alarm,
    /** The group's alarm fires (as SandboxGroupDO.alarm: the outbox's part of it). */
    fire() {
      alarm = null;
      outbox.resendDue(Date.now(), (p) => background.push(p));
    },
    /** Answers the in-flight write of `id`, then lets the outbox react. */
    async answer(id: string, committed: boolean) {
      const i = writes.findIndex((w) => w.op.row.id === id);
      expect(i).toBeGreaterThanOrEqual(0);
      writes.splice(i, 1)[0]!.done(committed);
      await settle();
    },
  };
}

describe("index outbox wake-ups", () => {
  it("an op whose write failed while a resend pass was in flight is sent again soon after that pass succeeds", async () => {
    const g = group();
    const now = Date.now();
    g.outbox.record("x", [op("x")], now);
    g.outbox.record("y", [op("y")], now);
    // The store is down: both first writes fail.
    const sends = [g.outbox.send(op("x")), g.outbox.send(op("y"))];
    await g.answer("x", false);
    await g.answer("y", false);
    await Promise.all(sends);
    // The alarm resends both; y's write fails again (the store is still down) and asks for the
    // alarm, which fires while x's resend is still in flight (its write is being retried).
    g.fire();
    await g.answer("y", false);
    g.fire();
    // The store is back: x's resend commits, and that pass ends.
    await g.answer("x", true);
    expect(g.rows.has("x")).toBe(false);
    // y waits in the outbox, sent by no one: the alarm must be armed for it, soon.
    expect([...g.rows.keys()]).toEqual(["y"]);
    expect(g.writes).toEqual([]);
    expect(g.alarm()).not.toBeNull();
    expect(g.alarm()!).toBeLessThanOrEqual(Date.now() + SOON_MS);
    g.fire();
    expect(g.writes.map((w) => w.op.row.id)).toEqual(["y"]);
    await g.answer("y", true);
    expect(g.rows.size).toBe(0);
  });

  it("an op carried with a create whose answer does not say it committed is sent again soon by the alarm", async () => {
    for (const answer of [{ ok: false }, { ok: true }, { ok: true, indexed: false }]) {
      const g = group();
      let answered!: (r: { ok: boolean; indexed?: boolean }) => void;
      const carried = g.outbox.carry(op("c"), 2).outcome(new Promise<{ ok: boolean; indexed?: boolean }>((r) => (answered = r)), (r) => r.ok && r.indexed === true);
      // An earlier alarm of the group (a sandbox's timer) fires while ClusterDO has the create: the
      // op is being sent, so not resent, and the 30 s check armed with it is gone.
      g.fire();
      expect(g.writes).toEqual([]);
      answered(answer);
      await carried;
      expect(g.alarm(), JSON.stringify(answer)).not.toBeNull();
      expect(g.alarm()!).toBeLessThanOrEqual(Date.now() + SOON_MS);
      g.fire();
      expect(g.writes.map((w) => w.op.row.id)).toEqual(["c"]);
    }
  });

  it("a create's carried op that committed leaves no outbox row; one its row stops standing for is kept in the outbox", async () => {
    const g = group();
    let answered!: (r: { indexed: boolean }) => void;
    const carried = g.outbox.carry(op("c"), 2).outcome(new Promise<{ indexed: boolean }>((r) => (answered = r)), (r) => r.indexed);
    // The row keeps generation 2 undelivered: it stands for the op.
    g.outbox.keep("c", 2);
    expect(g.rows.size).toBe(0);
    answered({ indexed: true });
    await carried;
    g.outbox.keep("c", null);
    expect(g.rows.size).toBe(0);

    // A newer intent (a kill) replaced generation 2 in the row before ClusterDO answered: the op
    // goes to the outbox, and stays there when the answer does not say it committed.
    const d = g.outbox.carry(op("d"), 2);
    let answeredD!: (r: { indexed: boolean }) => void;
    const carriedD = d.outcome(new Promise<{ indexed: boolean }>((r) => (answeredD = r)), (r) => r.indexed);
    g.outbox.keep("d", 3);
    expect([...g.rows.keys()]).toEqual(["d"]);
    answeredD({ indexed: false });
    await carriedD;
    g.fire();
    expect(g.writes.map((w) => w.op.row.id)).toEqual(["d"]);
    await g.answer("d", true);
    expect(g.rows.size).toBe(0);

    // A create whose row did not commit: nothing of it is kept.
    const e = g.outbox.carry(op("e"), 2);
    e.drop();
    g.outbox.keep("e", null);
    expect(g.rows.size).toBe(0);
  });
});
