// The bytes of MCP bodies the L7 handler holds at once for one sandbox: request bodies being
// screened, JSON answers being filtered, SSE events waiting for their end. Each is bounded by
// `maxMcpBody`; together they are bounded per sandbox too, since one sandbox may hold up to 256
// connections at once and the proxy's memory is every sandbox's (the agent's own process on the
// local driver). Pure bookkeeping.

/** One body's share of its sandbox's budget. */
export interface Hold {
  /** Holds `n` more bytes; false (nothing taken) when the sandbox's budget would be passed. */
  take(n: number): boolean;
  /** Holds exactly `n` bytes from now on (an SSE event's pending part grows and shrinks); false
   * (unchanged) when growing to `n` would pass the budget. */
  set(n: number): boolean;
  /** Gives back everything this share holds; again: nothing. */
  release(): void;
}

export class HeldBytes {
  readonly #held = new Map<string, number>();
  readonly #max: number;

  constructor(maxPerSandbox: number) {
    this.#max = maxPerSandbox;
  }

  /** What `sandbox` holds now. */
  held(sandbox: string): number {
    return this.#held.get(sandbox) ?? 0;
  }

  hold(sandbox: string): Hold {
    let mine = 0;
    const set = (n: number): boolean => {
      const now = this.held(sandbox) - mine + n;
      if (n > mine && now > this.#max) return false;
      if (now > 0) this.#held.set(sandbox, now);
      else this.#held.delete(sandbox);
      mine = n;
      return true;
    };
    return { take: (n) => set(mine + n), set, release: () => void set(0) };
  }
}
