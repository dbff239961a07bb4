// Bounds on waits (an enqueue's ack wait, a group's bound on an enqueue) that almost never fire:
// one runtime timer per `grainMs` slot, shared by every wait due in it, instead of one per wait.
// Under load each create armed and cleared two timers of its own, ~2.5 % of the edge's CPU per
// create (`npm run bench -- edge`, V8 profile). A wait fires up to `grainMs` late.

interface Slot {
  fns: Set<() => void>;
  timer: ReturnType<typeof setTimeout>;
}

export class CoarseTimers {
  private readonly grainMs: number;
  private readonly slots = new Map<number, Slot>();

  constructor(grainMs = 100) {
    this.grainMs = grainMs;
  }

  /** Runs `fn` once, `ms` from now (rounded up to the grain), unless the returned cancel runs first. */
  after(ms: number, fn: () => void): () => void {
    const at = Math.ceil((Date.now() + Math.max(0, ms)) / this.grainMs);
    let slot = this.slots.get(at);
    if (!slot) {
      const fns = new Set<() => void>();
      const timer = setTimeout(() => {
        this.slots.delete(at);
        for (const f of fns) f();
      }, Math.max(0, at * this.grainMs - Date.now()));
      slot = { fns, timer };
      this.slots.set(at, slot);
    }
    const { fns, timer } = slot;
    fns.add(fn);
    return () => {
      // An emptied slot drops its runtime timer too: pending timers are not free to keep.
      if (fns.delete(fn) && fns.size === 0 && this.slots.get(at)?.fns === fns) {
        clearTimeout(timer);
        this.slots.delete(at);
      }
    };
  }
}
