import { describe, expect, it } from "vitest";
import { backoffMs, WorkQueue } from "../../../controllers/lib/work-queue.ts";

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
