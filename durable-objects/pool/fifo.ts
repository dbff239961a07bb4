/**
 * Entries queued before the queue was built (a reloaded object's stored rows), oldest first, read
 * a page at a time when the queue reaches them, so building the queue costs O(1) however many there are.
 */
export interface Backlog<T> {
  /** The next page (some entries may be dead; `isLive` filters them); [] once none is left. */
  next(): T[];
  /** An entry not read yet stopped being live (`key` as the caller knows it): skip it when read. */
  drop(key: number): void;
}

/**
 * A first-in first-out queue with O(1) amortised push, pop and removal from anywhere.
 *
 * Removal is lazy: `remove` only drops the live count, and `shift` skips entries that are no
 * longer live (each entry is skipped at most once). A JS `Map` is not enough here: V8 leaves
 * deleted entries as holes that iteration scans, so popping its first key after k pops costs O(k).
 *
 * With a backlog, the queue starts as its backlog's `size` entries, read a page at a time; pushes
 * wait behind them (`tail`) until the backlog is read to its end.
 */
export class Fifo<T> {
  private items: (T | undefined)[] = [];
  private head = 0;
  private live = 0;
  private readonly isLive: (item: T) => boolean;
  private backlog: Backlog<T> | null = null;
  private tail: T[] = [];

  /** `isLive(item)` tells whether a queued entry still belongs here (checked when popping). */
  constructor(isLive: (item: T) => boolean, backlog?: { entries: Backlog<T>; size: number }) {
    this.isLive = isLive;
    if (backlog && backlog.size > 0) {
      this.backlog = backlog.entries;
      this.live = backlog.size;
    }
  }

  get size(): number {
    return this.live;
  }

  push(item: T): void {
    (this.backlog ? this.tail : this.items).push(item);
    this.live++;
  }

  /** Call when a queued item stops being live (its entry is skipped later); `key` names it to the
   * backlog, which may not have read it yet. */
  remove(key?: number): void {
    this.live--;
    if (key !== undefined) this.backlog?.drop(key);
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

  /** Live items, oldest first (the whole backlog is read first). */
  *values(): IterableIterator<T> {
    while (this.readMore());
    for (let i = this.head; i < this.items.length; i++) {
      const item = this.items[i];
      if (item !== undefined && this.isLive(item)) yield item;
    }
  }

  private skipDead(): void {
    do {
      while (this.head < this.items.length) {
        const item = this.items[this.head];
        if (item !== undefined && this.isLive(item)) return;
        this.items[this.head++] = undefined;
      }
      this.compact();
    } while (this.readMore());
  }

  /** Appends the backlog's next page, or (read to its end) the pushes that waited; false: nothing. */
  private readMore(): boolean {
    if (!this.backlog) return false;
    const page = this.backlog.next();
    if (!page.length) {
      this.backlog = null;
      page.push(...this.tail.splice(0));
    }
    for (const item of page) this.items.push(item);
    return page.length > 0;
  }

  // Drop the consumed prefix once it is most of the array, so memory stays O(live + removed).
  private compact(): void {
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
  }
}
