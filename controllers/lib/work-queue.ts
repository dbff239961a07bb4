// A keyed work queue in the controller-runtime mould: a key is processed by at most one worker at a
// time; adding a key that is being processed marks it dirty so it runs once more afterwards; many
// adds of a waiting key collapse into one run. The reconciler therefore always acts on the newest
// desired state, never on a backlog of events.
//
// Two lanes: urgent keys (a client is waiting: a claim, a pause, a resume) have their own
// workers, so they never queue behind a backlog of slow work such as warming up a pool of new
// sandboxes. Knobs: `concurrency` workers for the normal lane, `urgentConcurrency` (default: the
// same) for the urgent one.
//
// Claims before refills: a normal key the owner says may wait (`yields`, e.g. a pool member being
// made while its pool has stock) does not start while an urgent key is queued or running, nor
// within `yieldLingerMs` after the urgent lane went idle (a client's next claim usually follows
// within that). The refill's own work and what it sets off elsewhere (the API server, the
// kubelet) otherwise share the CPU with the claims (bench/kube.ts: at one client the claim took
// 2.3x the edge-only one with the refill running, 1.0x with it held). The owner's `yields` is the
// bound: it answers no once waiting could empty the pool (`yieldToUrgent`, pure, below). A key
// added `echo` (work that urgent work sets off, which may reach the queue before that urgent work
// does: a claim's refill) also waits out the linger from its own arrival, as though urgent work
// had just ended: the edge's pool sends a claim's refill before the claim reaches the agent, so
// after a pause the first refills of a burst started before the burst's claims (bench/kube.ts).
//
// A key whose work throws is retried with per-key exponential backoff (`Backoff`). Every retry
// loop of the agent and its drivers goes through here: the reconciler (per sandbox), the
// SandboxSet and SandboxClaim syncs (per object) use a WorkQueue; the informers' relist/rewatch,
// the edge link's reconnect and kubectl requests use `backoffMs`. Neutral ground: drivers and
// the agent both import it, neither imports the other for it.
//
// A queue given a `name` is measured (metrics.ts): its depth when scraped, and each pass's time
// and result under that name.
import { logger } from "./log.ts";
import { reconcileTime, reconcileTotal, trackQueue } from "./metrics.ts";

export type WorkResult = { requeueAfterMs?: number } | void;

/** Exponential backoff: `baseMs` doubling per consecutive failure, capped at `maxMs`. */
export interface Backoff {
  baseMs: number;
  maxMs: number;
}

export const DEFAULT_BACKOFF: Backoff = { baseMs: 100, maxMs: 30_000 };

/** The delay before retry number `attempt` (1: after the first failure). */
export function backoffMs(attempt: number, policy: Backoff = DEFAULT_BACKOFF): number {
  return Math.min(policy.maxMs, policy.baseMs * 2 ** Math.max(0, attempt - 1));
}

/** Whether a normal key that may yield waits now: while urgent work is queued or running, or
 * ended less than `lingerMs` ago. Returns the ms to wait before looking again (0: start it). */
export function yieldToUrgent(o: { yields: boolean; urgentBusy: boolean; msSinceUrgent: number; lingerMs: number }): number {
  if (!o.yields) return 0;
  if (o.urgentBusy) return Infinity; // looked at again when the urgent lane empties
  return Math.max(0, o.lingerMs - o.msSinceUrgent);
}

export class WorkQueue {
  readonly #work: (key: string) => Promise<WorkResult>;
  readonly #concurrency: number;
  readonly #urgentConcurrency: number;
  readonly #onError: (key: string, err: unknown) => void;
  readonly #name: string | undefined;
  readonly #backoff: Backoff;
  readonly #queued = new Set<string>();
  readonly #urgent = new Set<string>();
  readonly #runningUrgent = new Set<string>();
  readonly #running = new Set<string>();
  readonly #dirty = new Set<string>();
  readonly #timers = new Map<string, NodeJS.Timeout>();
  readonly #failures = new Map<string, number>();
  #idleWaiters: (() => void)[] = [];
  #closed = false;
  readonly #yields: ((key: string) => boolean) | undefined;
  readonly #yieldLingerMs: number;
  /** When the urgent lane last emptied (Date.now()), and the pump due once the linger is over. */
  #urgentIdleAt = -Infinity;
  /** When each queued `echo` key was added (Date.now()): it yields as if urgent work ended then. */
  readonly #echoAt = new Map<string, number>();
  #lingerTimer: NodeJS.Timeout | undefined;
  #lingerDue = Infinity;

  constructor(opts: {
    work: (key: string) => Promise<WorkResult>;
    concurrency?: number;
    urgentConcurrency?: number;
    onError?: (key: string, err: unknown) => void;
    backoff?: Backoff;
    /** The queue's name in metrics (`controller` and `name` labels); unnamed queues are not measured. */
    name?: string;
    /** Normal keys that wait for the urgent lane (see "Claims before refills" above); asked each
     * time such a key could start, so its answer may change (a pool's stock). */
    yields?: (key: string) => boolean;
    /** How long after the urgent lane empties yielding keys still wait (default 0). */
    yieldLingerMs?: number;
  }) {
    this.#work = opts.work;
    this.#name = opts.name;
    if (opts.name) trackQueue(opts.name, this);
    this.#backoff = opts.backoff ?? DEFAULT_BACKOFF;
    this.#concurrency = opts.concurrency ?? 8;
    this.#urgentConcurrency = opts.urgentConcurrency ?? this.#concurrency;
    this.#yields = opts.yields;
    this.#yieldLingerMs = opts.yieldLingerMs ?? 0;
    this.#onError = opts.onError ?? ((key, err) => logger("workqueue").error("work failed, retrying", { queue: opts.name, key, error: err }));
  }

  /** `echo`: the key is work that urgent work sets off and may arrive before it (a claim's
   * refill): a yielding key waits out the linger from now too (see the header). */
  add(key: string, opts: { urgent?: boolean; echo?: boolean } = {}): void {
    if (this.#closed) return;
    if (opts.urgent) this.#urgent.add(key);
    const timer = this.#timers.get(key);
    if (timer) {
      clearTimeout(timer);
      this.#timers.delete(key);
    }
    if (this.#running.has(key)) this.#dirty.add(key);
    else {
      // The first arrival counts: adds while it waits do not push it further back.
      if (opts.echo && !this.#queued.has(key)) this.#echoAt.set(key, Date.now());
      this.#queued.add(key);
    }
    this.#pump();
  }

  addAfter(key: string, ms: number): void {
    if (this.#closed || this.#timers.has(key)) return;
    const t = setTimeout(() => {
      this.#timers.delete(key);
      this.add(key);
    }, ms);
    t.unref();
    this.#timers.set(key, t);
  }

  /** Consecutive failures of a key's work so far (0 after a success). */
  failures(key: string): number {
    return this.#failures.get(key) ?? 0;
  }

  /** The delay before retry number `attempt` of a key under this queue's policy. */
  retryDelay(attempt: number): number {
    return backoffMs(attempt, this.#backoff);
  }

  get depth(): number {
    return this.#queued.size + this.#running.size;
  }

  /** Keys waiting for a delayed run (a requeue or a retry). */
  get scheduled(): number {
    return this.#timers.size;
  }

  /** Whether a key waits in (or, once dequeued, runs in) the urgent lane. */
  #isUrgent(key: string): boolean {
    return this.#urgent.has(key);
  }

  /** Resolves when nothing is queued or running (timers aside). */
  idle(): Promise<void> {
    if (this.depth === 0) return Promise.resolve();
    return new Promise((ok) => this.#idleWaiters.push(ok));
  }

  close(): void {
    this.#closed = true;
    for (const t of this.#timers.values()) clearTimeout(t);
    this.#timers.clear();
    clearTimeout(this.#lingerTimer);
    this.#queued.clear();
    this.#echoAt.clear();
  }

  #pump(): void {
    const normalRunning = this.#running.size - this.#runningUrgent.size;
    let normalSlots = this.#concurrency - normalRunning;
    let urgentSlots = this.#urgentConcurrency - this.#runningUrgent.size;
    // Urgent keys queued (or running again once done) count as busy as much as running ones.
    const urgentBusy = this.#runningUrgent.size > 0 || this.#urgent.size > 0;
    const now = this.#yields ? Date.now() : 0;
    const msSinceUrgent = now - this.#urgentIdleAt;
    let lookAgainMs = Infinity;
    for (const key of this.#queued) {
      const urgent = this.#isUrgent(key);
      if (urgent ? urgentSlots <= 0 : normalSlots <= 0) continue;
      if (!urgent && this.#yields) {
        const echoAt = this.#echoAt.get(key);
        const since = echoAt === undefined ? msSinceUrgent : Math.min(msSinceUrgent, now - echoAt);
        const wait = yieldToUrgent({ yields: this.#yields(key), urgentBusy, msSinceUrgent: since, lingerMs: this.#yieldLingerMs });
        if (wait > 0) {
          lookAgainMs = Math.min(lookAgainMs, wait);
          continue;
        }
      }
      if (urgent) urgentSlots--;
      else normalSlots--;
      this.#queued.delete(key);
      this.#echoAt.delete(key);
      this.#running.add(key);
      if (urgent) {
        this.#urgent.delete(key);
        this.#runningUrgent.add(key);
      }
      void this.#run(key);
    }
    // Keys waiting out the linger start when it ends (those waiting on busy urgent work, when the
    // urgent lane empties: #run pumps then). An echo key's wait may end before the one the timer
    // was set for: the earlier one wins.
    if (lookAgainMs !== Infinity && now + lookAgainMs < this.#lingerDue && !this.#closed) {
      clearTimeout(this.#lingerTimer);
      this.#lingerDue = now + lookAgainMs;
      this.#lingerTimer = setTimeout(() => {
        this.#lingerTimer = undefined;
        this.#lingerDue = Infinity;
        this.#pump();
      }, lookAgainMs);
    }
    if (this.depth === 0) {
      const waiters = this.#idleWaiters;
      this.#idleWaiters = [];
      for (const w of waiters) w();
    }
  }

  async #run(key: string): Promise<void> {
    const started = this.#name ? performance.now() : 0;
    let outcome = "success";
    try {
      const result = await this.#work(key);
      this.#failures.delete(key);
      if (result?.requeueAfterMs !== undefined) {
        outcome = "requeue_after";
        this.addAfter(key, result.requeueAfterMs);
      }
    } catch (err) {
      outcome = "error";
      this.#onError(key, err);
      const n = (this.#failures.get(key) ?? 0) + 1;
      this.#failures.set(key, n);
      this.addAfter(key, this.retryDelay(n));
    } finally {
      if (this.#name) {
        reconcileTime.observe({ controller: this.#name }, (performance.now() - started) / 1000);
        reconcileTotal.inc({ controller: this.#name, result: outcome });
      }
      this.#running.delete(key);
      if (this.#runningUrgent.delete(key) && this.#runningUrgent.size === 0) this.#urgentIdleAt = Date.now();
      if (this.#dirty.delete(key)) this.#queued.add(key);
      this.#pump();
    }
  }
}
