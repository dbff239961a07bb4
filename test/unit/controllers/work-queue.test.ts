import { describe, expect, it } from "vitest";
import { backoffMs, WorkQueue, yieldToUrgent } from "../../../controllers/lib/work-queue.ts";
import { waitFor } from "../../support/wait-for.ts";

/** Work that finishes only when the test releases it. */
function gatedWork() {
  const started: string[] = [];
  const gates = new Map<string, () => void>();
  const work = (key: string) =>
    new Promise<void>((ok) => {
      started.push(key);
      gates.set(key, ok);
    });
  const release = (key: string) => gates.get(key)?.();
  return { started, release, work };
}

describe("WorkQueue", () => {
  it("runs a key at most once at a time and once more if it was added while running", async () => {
    const { started, release, work } = gatedWork();
    const q = new WorkQueue({ work, concurrency: 4 });
    q.add("a");
    q.add("a");
    q.add("a");
    await Promise.resolve();
    expect(started).toEqual(["a"]);
    release("a");
    await new Promise((r) => setTimeout(r, 0));
    expect(started).toEqual(["a", "a"]);
    release("a");
    await q.idle();
  });

  it("gives urgent keys their own workers, so they never wait behind slow work", async () => {
    const { started, release, work } = gatedWork();
    const q = new WorkQueue({ work, concurrency: 1 });
    for (const k of ["warm1", "warm2", "warm3"]) q.add(k);
    q.add("claim", { urgent: true });
    await Promise.resolve();
    expect(started).toEqual(["warm1", "claim"]);
    release("claim");
    release("warm1");
    await new Promise((r) => setTimeout(r, 0));
    expect(started).toEqual(["warm1", "claim", "warm2"]);
    release("warm2");
    await new Promise((r) => setTimeout(r, 0));
    release("warm3");
    await q.idle();
  });

  it("claims before refills: a key that yields waits while an urgent key is queued or running and for the linger after; others start at once", async () => {
    const { started, release, work } = gatedWork();
    const q = new WorkQueue({ work, concurrency: 4, urgentConcurrency: 1, yields: (k) => k.startsWith("refill"), yieldLingerMs: 20 });
    q.add("claim1", { urgent: true });
    q.add("claim2", { urgent: true }); // queued behind claim1 (one urgent worker)
    q.add("refill1");
    q.add("scaledown");
    await Promise.resolve();
    expect(started).toEqual(["claim1", "scaledown"]);
    release("claim1");
    await new Promise((r) => setTimeout(r, 0));
    expect(started).toEqual(["claim1", "scaledown", "claim2"]);
    release("claim2");
    await new Promise((r) => setTimeout(r, 0));
    expect(started).not.toContain("refill1"); // the linger: a client's next claim may follow
    await waitFor(() => started.includes("refill1"), { what: "the refill once the claims are over" });
    release("refill1");
    release("scaledown");
    await q.idle();
  });

  it("claims before refills: a yielding key added as an echo waits out the linger from its arrival, so the urgent key behind it goes first even after a lull", async () => {
    const { started, release, work } = gatedWork();
    const q = new WorkQueue({ work, concurrency: 4, urgentConcurrency: 1, yields: (k) => k.startsWith("refill"), yieldLingerMs: 50 });
    // No urgent work yet: a refill sent ahead of its claim, a plain yielding key (a requeue), and
    // a key that never yields.
    q.add("refill1", { echo: true });
    q.add("refill2");
    q.add("scaledown");
    await new Promise((r) => setTimeout(r, 10));
    expect(started).toEqual(["refill2", "scaledown"]);
    q.add("refill1", { echo: true }); // added again while it waits: its first arrival counts
    q.add("claim1", { urgent: true }); // the claim that set the refill off, arriving after it
    await new Promise((r) => setTimeout(r, 60));
    expect(started).toEqual(["refill2", "scaledown", "claim1"]); // past its own linger, the claim runs
    release("claim1");
    await new Promise((r) => setTimeout(r, 0));
    expect(started).not.toContain("refill1"); // the linger after the claim
    await waitFor(() => started.includes("refill1"), { what: "the refill once the claim is over" });
    for (const k of ["refill1", "refill2", "scaledown"]) release(k);
    await q.idle();
  });

  it("yieldToUrgent: waits while urgent work is busy, then out the linger; never for a key that may not yield", () => {
    expect(yieldToUrgent({ yields: true, urgentBusy: true, msSinceUrgent: 1e9, lingerMs: 200 })).toBe(Infinity);
    expect(yieldToUrgent({ yields: true, urgentBusy: false, msSinceUrgent: 50, lingerMs: 200 })).toBe(150);
    expect(yieldToUrgent({ yields: true, urgentBusy: false, msSinceUrgent: 250, lingerMs: 200 })).toBe(0);
    expect(yieldToUrgent({ yields: false, urgentBusy: true, msSinceUrgent: 0, lingerMs: 200 })).toBe(0);
  });

  it("retries a failing key with backoff", async () => {
    let calls = 0;
    const q = new WorkQueue({
      work: async () => {
        if (++calls < 3) throw new Error("not yet");
      },
      onError: () => {},
    });
    q.add("k");
    const deadline = Date.now() + 2_000;
    while (calls < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(calls).toBe(3);
    q.close();
  });

  it("backs off per key: base doubling per failure in a row, capped, and reset by a success", async () => {
    expect([1, 2, 3, 4, 5, 6].map((n) => backoffMs(n, { baseMs: 100, maxMs: 1000 }))).toEqual([100, 200, 400, 800, 1000, 1000]);
    let calls = 0;
    const q = new WorkQueue({
      work: async () => {
        if (++calls < 4) throw new Error("not yet");
      },
      onError: () => {},
      backoff: { baseMs: 1, maxMs: 2 },
    });
    const failures: number[] = [];
    q.add("k");
    while (calls < 4) {
      failures.push(q.failures("k"));
      await new Promise((r) => setTimeout(r, 1));
    }
    await q.idle();
    expect(Math.max(...failures)).toBe(3);
    expect(q.failures("k")).toBe(0);
    q.close();
  });
});
