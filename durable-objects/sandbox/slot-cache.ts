// The group's sandboxes in memory: one slot per sandbox, loaded from its row on demand, with a
// bounded number of idle ones kept. Every change is in the row before anything is awaited, so a
// dropped slot is reloaded as it was.
import type { SandboxState } from "./state.ts";
import type { SandboxRow, Undelivered } from "./store.ts";

/** One sandbox of the group, as this object instance holds it. */
export interface Slot {
  state: SandboxState | null;
  /**
   * The newest intent ClusterDO has not confirmed taking. Written in the same row write as the
   * transition that made it, so an instance that dies before the enqueue answers leaves it for the
   * alarm; cleared only by the success of that generation or a newer one.
   */
  undelivered: Undelivered | null;
  /** waitRunning() callers, woken after every transition. */
  waiters: Set<() => void>;
  /** Gateway requests held while its pid 1 starts again (`restarted`), by who sent them. */
  restartHeld: { owner: number; anyone: number };
  /** Operations holding this slot across an await: a slot in use is never evicted. */
  busy: number;
  /** Generation of the newest enqueue in flight from this instance (0: none). */
  sending: number;
  /** `undelivered` changed in memory and its row is not written yet. */
  dirty: boolean;
}

export class SlotCache {
  private readonly slots = new Map<string, Slot>();
  private readonly load: (id: string) => SandboxRow | null;
  /** Slots kept in memory beyond those in use; older idle ones are dropped and reloaded on demand. */
  maxSlots = 1_000;

  /** `load`: the stored row of a sandbox, or null for an unknown id (read without caching). */
  constructor(load: (id: string) => SandboxRow | null) {
    this.load = load;
  }

  get size(): number {
    return this.slots.size;
  }

  /** The sandbox's slot, loaded from its row (or empty, for a create). */
  get(id: string): Slot {
    let slot = this.find(id);
    if (!slot) {
      slot = newSlot(null, null);
      this.slots.set(id, slot);
    }
    return slot;
  }

  /** The slot of a stored sandbox; null (and nothing cached) for an unknown id. */
  find(id: string): Slot | null {
    const cached = this.slots.get(id);
    if (cached) return cached;
    const row = this.load(id);
    if (!row) return null;
    const slot = newSlot(row.state, row.undelivered);
    // Reads (route, info) load slots too: the bound holds for them, and a slot just loaded is
    // never the one dropped.
    if (this.slots.size >= this.maxSlots) this.trim();
    this.slots.set(id, slot);
    return slot;
  }

  /**
   * A slot nobody uses: an empty one goes at once (probes of unknown ids do not pile up); beyond
   * maxSlots the oldest idle ones go too.
   */
  release(id: string, slot: Slot): void {
    if (slot.busy > 0 || slot.waiters.size > 0 || this.slots.get(id) !== slot) return;
    if (!slot.state && !slot.undelivered) this.slots.delete(id);
    else if (this.slots.size > this.maxSlots) this.trim();
  }

  /** Forgets every slot (after a failed write batch: what is stored is reloaded on demand). */
  clear(): void {
    this.slots.clear();
  }

  /** Drops the oldest idle slots down to 90 % of the bound (slots in use stay). */
  private trim(): void {
    for (const [id, s] of this.slots) {
      if (this.slots.size <= this.maxSlots * 0.9) return;
      if (s.busy === 0 && s.waiters.size === 0 && !s.dirty) this.slots.delete(id);
    }
  }
}

/** Wakes the slot's waitRunning() callers (after a transition). */
export function notify(slot: Slot): void {
  for (const w of [...slot.waiters]) w();
}

function newSlot(state: SandboxState | null, undelivered: Undelivered | null): Slot {
  return { state, undelivered, waiters: new Set(), restartHeld: { owner: 0, anyone: 0 }, busy: 0, sending: 0, dirty: false };
}
