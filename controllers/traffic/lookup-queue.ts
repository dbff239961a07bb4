// Name lookups of every sandbox share the host's resolver: getaddrinfo on libuv's thread pool,
// where at most 2 run at once (slow I/O gets half the default 4 threads), first come first
// served. A sandbox asking for names whose servers never answer would hold those slots for the
// resolver's whole timeout each and queue every other sandbox's lookups (its DNS, SNI and
// HTTP_PROXY checks) behind its own. Here lookups wait in a queue per sandbox and are let through
// in turn, one sandbox after another: at most `slots` at once (what the pool runs anyway, so no
// throughput is lost) and `perSandbox` of one sandbox; past `queued` waiting, a sandbox's lookup
// fails at once (its DNS answers SERVFAIL). Pure scheduling: no timers, no I/O.

export interface LookupQueueOptions {
  /** Lookups running at once, all sandboxes together. */
  slots?: number;
  /** Lookups of one sandbox running at once. */
  perSandbox?: number;
  /** Lookups of one sandbox waiting at most; beyond, refused (`EBUSY`). */
  queued?: number;
}

const LOOKUP_SLOTS = 2;
const LOOKUP_PER_SANDBOX = 1;
const LOOKUP_QUEUED = 64;

interface Turns {
  running: number;
  waiting: (() => void)[];
  /** When it was last let through (a count of turns; 0: never). */
  served: number;
}

export class LookupQueue {
  readonly #slots: number;
  readonly #perSandbox: number;
  readonly #queued: number;
  #running = 0;
  #turn = 0;
  /** Sandboxes with lookups running or waiting. */
  readonly #turns = new Map<string, Turns>();

  constructor(o: LookupQueueOptions = {}) {
    this.#slots = o.slots ?? LOOKUP_SLOTS;
    this.#perSandbox = o.perSandbox ?? LOOKUP_PER_SANDBOX;
    this.#queued = o.queued ?? LOOKUP_QUEUED;
  }

  /** `lookup` run in `sandbox`'s turn; rejected with code `EBUSY` when its queue is full. */
  run<T>(sandbox: string, lookup: () => Promise<T>): Promise<T> {
    let t = this.#turns.get(sandbox);
    if (!t) this.#turns.set(sandbox, (t = { running: 0, waiting: [], served: 0 }));
    if (t.waiting.length >= this.#queued) return Promise.reject(Object.assign(new Error(`${this.#queued} lookups of ${sandbox || "the sandbox"} already waiting`), { code: "EBUSY" }));
    const turns = t;
    return new Promise<T>((resolve, reject) => {
      turns.waiting.push(() => {
        new Promise<T>((r) => r(lookup()))
          .then(resolve, reject)
          .finally(() => {
            this.#running--;
            turns.running--;
            if (turns.running === 0 && turns.waiting.length === 0) this.#turns.delete(sandbox);
            this.#pump();
          });
      });
      this.#pump();
    });
  }

  /** Lookups running and waiting now (for tests and metrics). */
  get size(): { running: number; waiting: number } {
    let waiting = 0;
    for (const t of this.#turns.values()) waiting += t.waiting.length;
    return { running: this.#running, waiting };
  }

  #pump(): void {
    while (this.#running < this.#slots) {
      // The sandbox let through longest ago (or never): every other one waiting goes before a
      // sandbox's next lookup.
      let t: Turns | undefined;
      for (const x of this.#turns.values()) if (x.waiting.length > 0 && x.running < this.#perSandbox && (!t || x.served < t.served)) t = x;
      if (!t) return;
      t.served = ++this.#turn;
      this.#running++;
      t.running++;
      t.waiting.shift()!();
    }
  }
}
