// The pool's FIFO: order, lazy removal from the middle, and compaction after many pops.
import { describe, expect, it } from "vitest";
import { Fifo } from "../../../../durable-objects/pool/fifo.ts";

interface Item {
  id: number;
  live: boolean;
}

function queue() {
  return new Fifo<Item>((i) => i.live);
}

describe("Fifo", () => {
  it("pops in insertion order and skips items removed from the middle", () => {
    const q = queue();
    const items = [1, 2, 3, 4].map((id) => ({ id, live: true }));
    for (const i of items) q.push(i);
    items[1]!.live = false;
    q.remove();
    expect(q.size).toBe(3);
    expect([q.shift()?.id, q.shift()?.id, q.shift()?.id, q.shift()]).toEqual([1, 3, 4, undefined]);
    expect(q.size).toBe(0);
  });

  it("peek shows the oldest live item without taking it", () => {
    const q = queue();
    const a = { id: 1, live: true };
    q.push(a);
    q.push({ id: 2, live: true });
    a.live = false;
    q.remove();
    expect(q.peek()?.id).toBe(2);
    expect(q.size).toBe(1);
    expect([...q.values()].map((i) => i.id)).toEqual([2]);
  });

  it("stays correct across 100,000 pushes and pops (compaction keeps order)", () => {
    const q = queue();
    let next = 0;
    let expected = 0;
    for (let round = 0; round < 1_000; round++) {
      for (let k = 0; k < 100; k++) q.push({ id: next++, live: true });
      for (let k = 0; k < 99; k++) expect(q.shift()?.id).toBe(expected++);
    }
    expect(q.size).toBe(1_000);
    expect(q.peek()?.id).toBe(expected);
  });
});
