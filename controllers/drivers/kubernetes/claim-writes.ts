// When a claim's write-behind goes: the claimed Sandbox's and Pod's relabel (claimed, owner removed,
// the claim's metadata) and the Sandbox's status (kubernetes-driver.ts `ensure`). A claim is
// answered once the pod's runtime took /init; these writes only tell kubectl and selectors. Sent
// 20 ms after each claim, they landed inside the other claims of a burst: the agent building the
// patches and parsing their answers, the API server's and etcd's work, and the watch events they
// bring back, all on the same cores the burst's /init answers waited for (on a loaded node a
// claim's latency follows CPU: README, "Where a 50-client claim goes"). So they wait while claims
// keep arriving, and go once claims pause for `lingerMs`, or `maxWaitMs` after their own claim,
// whichever is first: a steady stream of claims delays them by that bound, never more.
// A claim whose pod has a traffic-proxy is not held: the same write hands the claim's egress rules
// to its proxy (kubernetes-driver.ts `#sync`).

/** How long after the latest claim the held writes still wait: as long as a pool's refill does
 * (reconciler.ts REFILL_YIELD_LINGER_MS), for the same reason: a loaded edge delivers a burst's
 * claims in flushes hundreds of ms apart, and with 100 ms the writes went in those gaps, into the
 * next flush's /inits (bench/kube.ts, s16: a quarter of the claims' patches inside the running
 * windows). A judgment, not a measured optimum. */
export const CLAIM_WRITE_LINGER_MS = 500;
/** How long a claim's writes wait at most, however many claims follow it. */
export const CLAIM_WRITE_MAX_WAIT_MS = 1000;

/** ms until a claim made at `claimedAt` may be written, the latest claim having come at
 * `lastClaimAt` (0: now). */
export function claimWriteDelay(o: { now: number; claimedAt: number; lastClaimAt: number; lingerMs?: number; maxWaitMs?: number }): number {
  const due = Math.min(o.claimedAt + (o.maxWaitMs ?? CLAIM_WRITE_MAX_WAIT_MS), o.lastClaimAt + (o.lingerMs ?? CLAIM_WRITE_LINGER_MS));
  return Math.max(0, due - o.now);
}

/** The claims whose writes wait (`claimWriteDelay`), each handed to `write` when due. One timer. */
export class ClaimWrites {
  /** Held claims by sandbox, in the order of their claims (so the oldest is first). */
  readonly #held = new Map<string, number>();
  #last = -Infinity;
  #timer: NodeJS.Timeout | undefined;
  readonly #write: (id: string) => void;
  readonly #now: () => number;

  constructor(write: (id: string) => void, now: () => number = Date.now) {
    this.#write = write;
    this.#now = now;
  }

  get size(): number {
    return this.#held.size;
  }

  /** A claim of `id` came now: its writes (and those held) wait for the next pause. */
  claimed(id: string): void {
    const now = this.#now();
    this.#last = now;
    if (!this.#held.has(id)) this.#held.set(id, now);
    this.#arm(now);
  }

  /** Drops `id` (its sandbox went, or its writes went another way). */
  forget(id: string): void {
    this.#held.delete(id);
  }

  stop(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#held.clear();
  }

  #arm(now: number): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    const first = this.#held.values().next();
    if (first.done) return;
    // The oldest claim's bound or the pause after the latest, whichever comes first.
    const delay = claimWriteDelay({ now, claimedAt: first.value, lastClaimAt: this.#last });
    this.#timer = setTimeout(() => this.#due(), delay);
  }

  #due(): void {
    this.#timer = undefined;
    const now = this.#now();
    for (const [id, claimedAt] of this.#held) {
      if (claimWriteDelay({ now, claimedAt, lastClaimAt: this.#last }) > 0) break; // the rest are younger
      this.#held.delete(id);
      this.#write(id);
    }
    this.#arm(now);
  }
}
