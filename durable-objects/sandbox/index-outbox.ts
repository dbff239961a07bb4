// A sandbox group's index outbox: every index op is kept in the group's own SQLite, in the same
// commit as the change that made it, until SandboxIndexDO confirms that libSQL committed it. An op
// that failed (sqld down, a lost answer) or was in flight when the instance died is sent again
// from the group's alarm, with backoff, until it commits: a sandbox the client was told about is
// listed once the store is back, however long the outage. Only the newest revision per sandbox is
// kept and every op is a whole row guarded by its revision (a sandbox that is gone is a tombstone),
// so a resend can never undo a newer write, and a killed sandbox never comes back.
import type { IndexOp } from "../store/sandbox-index.ts";
import type { IndexQueue } from "./index-queue.ts";
import type { SandboxStore } from "./store.ts";

/** After a failed write, the first resend waits this long, doubling up to MAX_RETRY_MS. */
const MIN_RETRY_MS = 500;
const MAX_RETRY_MS = 4_000;
/**
 * An op not confirmed this long after it was recorded is looked at by the alarm (an instance that
 * died with writes in flight leaves them to its successor this way).
 */
const CHECK_MS = 30_000;
/** Ops sent again per alarm. */
const RESEND_BATCH = 1_000;

type Store = Pick<SandboxStore, "outboxPut" | "outboxDone" | "outbox">;

export class IndexOutbox {
  private readonly store: Store;
  private readonly queue: IndexQueue;
  private readonly defer: (write: () => void) => void;
  private readonly arm: (at: number) => void;
  /** Sandbox id → the newest revision being sent from this instance. */
  private readonly sending = new Map<string, number>();
  private retryMs = MIN_RETRY_MS;
  private resending: Promise<void> | null = null;
  /** The alarm fired while `resending` was in flight: another pass is owed once it ends. */
  private owed = false;

  /**
   * `defer`: adds a write to the group's current commit; `arm`: asks for the group's alarm no later
   * than the given time.
   */
  constructor(store: Store, queue: IndexQueue, defer: (write: () => void) => void, arm: (at: number) => void) {
    this.store = store;
    this.queue = queue;
    this.defer = defer;
    this.arm = arm;
  }

  /** Keeps `ops` in the commit being prepared. Call before awaiting that commit, then send them. */
  record(id: string, ops: readonly IndexOp[], now: number): void {
    if (ops.length === 0) return;
    const store = this.store;
    for (const op of ops) this.defer(() => store.outboxPut({ id, rev: op.row.rev, op }));
    this.arm(now + CHECK_MS);
  }

  /** Writes one recorded op through the group's ordered queue; true once libSQL committed it. */
  async send(op: IndexOp): Promise<boolean> {
    const release = this.hold(op);
    try {
      const committed = await this.queue.push(op);
      this.settle(op, committed);
      return committed;
    } finally {
      release();
    }
  }

  /**
   * A recorded op travels another way (a create's row, committed by ClusterDO with its intent):
   * `outcome` says whether it committed. One that did not (or whose answer does not say) is written
   * again by the caller, and in any case by the alarm, armed here: an alarm that fired while the op
   * was carried skipped it and took the op's 30 s check with it.
   */
  async carried<T>(op: IndexOp, outcome: Promise<T>, committed: (r: T) => boolean): Promise<T> {
    const release = this.hold(op);
    try {
      const r = await outcome;
      this.settle(op, committed(r));
      return r;
    } finally {
      release();
    }
  }

  /** Alarm: sends again what the index has not confirmed (not what this instance is sending). */
  resendDue(now: number, waitUntil: (p: Promise<unknown>) => void): void {
    // This alarm was (maybe) asked for by an op that failed after the pass in flight took its
    // entries: that op is owed a pass. Dropping the alarm here lost it (nothing re-arms for it when
    // the pass in flight commits) until the group's next unrelated alarm, minutes later.
    if (this.resending) {
      this.owed = true;
      return;
    }
    const entries = this.store.outbox(RESEND_BATCH).filter((e) => (this.sending.get(e.id) ?? -1) < e.rev);
    if (entries.length === 0) return;
    const ended = (allCommitted: boolean) => {
      this.resending = null;
      if (allCommitted) this.retryMs = MIN_RETRY_MS;
      // More than one batch's worth waits, or a pass is owed: go on (failed ops armed their backoff).
      if (entries.length === RESEND_BATCH || this.owed) this.arm(allCommitted ? Date.now() : Date.now() + this.retryMs);
      this.owed = false;
    };
    this.resending = Promise.all(entries.map((e) => this.send(e.op))).then(
      (done) => ended(done.every(Boolean)),
      () => ended(false),
    );
    waitUntil(this.resending);
  }

  private hold(op: IndexOp): () => void {
    const { id, rev } = op.row;
    if ((this.sending.get(id) ?? -1) < rev) this.sending.set(id, rev);
    return () => {
      if (this.sending.get(id) === rev) this.sending.delete(id);
    };
  }

  private settle(op: IndexOp, committed: boolean): void {
    if (committed) {
      const store = this.store;
      this.defer(() => store.outboxDone(op.row.id, op.row.rev));
      return;
    }
    this.arm(Date.now() + this.retryMs);
    this.retryMs = Math.min(this.retryMs * 2, MAX_RETRY_MS);
  }
}
