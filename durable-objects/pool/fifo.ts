/**
 * A first-in first-out queue with O(1) amortised push, pop and removal from anywhere.
 *
 * Removal is lazy: `remove` only drops the live count, and `shift` skips entries that are no
 * longer live (each entry is skipped at most once). A JS `Map` is not enough here: V8 leaves
 * deleted entries as holes that iteration scans, so popping its first key after k pops costs O(k).
 */
export class Fifo<T> {
  private items: (T | undefined)[] = [];
  private head = 0;
  private live = 0;
  private readonly isLive: (item: T) => boolean;

  /** `isLive(item)` tells whether a queued entry still belongs here (checked when popping). */
  constructor(isLive: (item: T) => boolean) {
    this.isLive = isLive;
  }

  get size(): number {
    return this.live;
  }

  push(item: T): void {
    this.items.push(item);
    this.live++;
  }

  /** Call when a queued item stops being live (its entry is skipped later). */
  remove(): void {
    this.live--;
  }

  /** The oldest live item, without removing it. */
  peek(): T | undefined {
    this.skipDead();
    return this.items[this.head];
  }

  /** Removes and returns the oldest live item. The caller then makes it not live. */
  shift(): T | undefined {
    this.skipDead();
    if (this.head >= this.items.length) return undefined;
    const item = this.items[this.head];
    this.items[this.head++] = undefined;
    this.live--;
    this.compact();
    return item;
  }

  /** Live items, oldest first. */
  *values(): IterableIterator<T> {
    for (let i = this.head; i < this.items.length; i++) {
      const item = this.items[i];
      if (item !== undefined && this.isLive(item)) yield item;
    }
  }

  private skipDead(): void {
    while (this.head < this.items.length) {
      const item = this.items[this.head];
      if (item !== undefined && this.isLive(item)) return;
      this.items[this.head++] = undefined;
    }
    this.compact();
  }

  // Drop the consumed prefix once it is most of the array, so memory stays O(live + removed).
  private compact(): void {
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
  }
}
