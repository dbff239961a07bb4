// A sandbox group's index outbox: every index op is kept in the group's own SQLite, in the same
// commit as the change that made it, until SandboxIndexDO confirms that libSQL committed it. An op
// that failed (sqld down, a lost answer) or was in flight when the instance died is sent again
// from the group's alarm, with backoff, until it commits: a sandbox the client was told about is
// listed once the store is back, however long the outage. Only the newest revision per sandbox is
// kept and every op is a whole row guarded by its revision (a sandbox that is gone is a tombstone),
// so a resend can never undo a newer write, and a killed sandbox never comes back.
// One exception, a create's or a kill's op carried with its intent (`carry`): the sandbox's own row
// keeps the intent until ClusterDO answers, and stands for the op meanwhile.
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

/** A create's or a kill's op carried with its intent (IndexOutbox.carry). */
export interface Carried {
  /** Settles it by the enqueue's answer (which never rejects); resolves to that answer. */
  outcome<T>(answer: Promise<T>, committed: (r: T) => boolean): Promise<T>;
  /** The sandbox's row was not stored (its commit failed): nothing to keep. */
  drop(): void;
}

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
   * Sandbox id → a create's or a kill's op carried with its intent and not written to the outbox
   * (`carry`): the sandbox's stored row, which keeps that intent as undelivered (at `generation`),
   * stands for it until the answer comes.
   */
  private readonly unrecorded = new Map<string, { op: IndexOp; generation: number }>();

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
   * A create's or a kill's op travels with its intent (ClusterDO commits it with the intent)
   * instead of through an outbox row: an outbox row written with the create and deleted once
   * ClusterDO answered was two of the ten SQLite statements of a warm create, ~3 % of the edge's
   * CPU per create, and a kill's op through SandboxIndexDO was a workerd invocation. It is as
   * durable: the group's row, written in the same commit, keeps the intent as undelivered until
   * ClusterDO answers, and a redelivery of an undelivered intent writes the sandbox's current row
   * through the outbox (`SandboxGroupDO.fire`). The op is written to the outbox when that stops
   * holding before the answer (`keep`: the row's undelivered intent changed), and when the answer
   * does not say it committed (the caller writes it again, and the alarm, armed here, until it
   * does). `outcome` never rejects. A kill carried while its create's op still is (the create not
   * yet answered) writes that op to the outbox first, as `keep` would.
   */
  carry(op: IndexOp, generation: number): Carried {
    const id = op.row.id;
    this.keep(id, generation);
    const entry = { op, generation };
    this.unrecorded.set(id, entry);
    const mine = () => this.unrecorded.get(id) === entry;
    return {
      outcome: async (outcome, committed) => {
        const release = this.hold(op);
        try {
          const r = await outcome;
          const ok = committed(r);
          if (mine()) {
            this.unrecorded.delete(id);
            if (ok) return r;
            this.record(id, [op], Date.now());
          }
          this.settle(op, ok);
          return r;
        } finally {
          release();
        }
      },
      drop: () => {
        if (mine()) this.unrecorded.delete(id);
      },
    };
  }

  /**
   * The sandbox's row is about to be written with `undelivered` (the generation of the intent it
   * keeps, or null): a carried op its row no longer stands for is written to the outbox in the
   * same commit.
   */
  keep(id: string, undelivered: number | null): void {
    const entry = this.unrecorded.get(id);
    if (!entry || entry.generation === undelivered) return;
    this.unrecorded.delete(id);
    this.record(id, [entry.op], Date.now());
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
