// The pool's FIFO: order, lazy removal from the middle, compaction after many pops, and a backlog
// (a reloaded pool's stored members) read a page at a time ahead of later pushes.
import { describe, expect, it } from "vitest";
import { Fifo, type Backlog } from "../../../../durable-objects/pool/fifo.ts";

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

  it("reads a backlog a page at a time when it reaches it, ahead of pushes, skipping dropped entries", () => {
    const stored = [1, 2, 3, 4, 5, 6, 7].map((id) => ({ id, live: true }));
    const pages: number[] = [];
    const dropped = new Set<number>();
    let read = 0;
    const backlog: Backlog<Item> = {
      next: () => {
        const page = stored.slice(read, read + 3).filter((i) => !dropped.has(i.id));
        pages.push(read);
        read += 3;
        return read - 3 < stored.length ? page : [];
      },
      drop: (id) => dropped.add(id),
    };
    const q = new Fifo<Item>((i) => i.live, { entries: backlog, size: stored.length });
    expect(q.size).toBe(7);
    q.push({ id: 8, live: true });
    expect(pages).toEqual([]);
    expect(q.shift()?.id).toBe(1);
    expect(pages).toEqual([0]);
    // 5 leaves before it is read; 2 was read already (its entry dies lazily).
    q.remove(5);
    stored[1]!.live = false;
    q.remove(2);
    expect(q.size).toBe(5);
    expect([q.shift()?.id, q.shift()?.id, q.shift()?.id, q.shift()?.id, q.shift()?.id, q.shift()]).toEqual([3, 4, 6, 7, 8, undefined]);
    expect(q.size).toBe(0);
    // Read to its end: pushes queue directly.
    q.push({ id: 9, live: true });
    expect([...q.values()].map((i) => i.id)).toEqual([9]);
  });
});
