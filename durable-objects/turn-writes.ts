// SQLite writes of a Durable Object held until the end of the turn, so the writes of every call
// that came meanwhile share one commit. Each RPC call is an event of its own, and each event's
// writes are a commit of its own: under load (one claim and one enqueue per create, 50 creates in
// flight) that commit was the larger part of the calls' cost. A caller that must answer only once
// its writes are durable awaits `written` (the output gate then holds its answer until the
// commit); every other write or read of the same tables runs `flush()` first, so the store never
// falls behind what it is asked, and nothing that depends on the writes leaves before them.

import { edgeLogger } from "./tracing/edge-log.ts";

const LOG = edgeLogger("storage");

export class TurnWrites {
  private writes: (() => void)[] = [];
  /** The rows of the last write deferred, when it was a `deferRow` batch: later rows of the same
   * batch join it. */
  private open: { batch: (rows: never[]) => void; rows: unknown[] } | null = null;
  /** The writes deferred are one, of one statement. */
  private lone = false;
  private settle: { promise: Promise<void>; resolve: () => void; reject: (err: unknown) => void } | null = null;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private readonly what: string;
  private readonly storage: Pick<DurableObjectStorage, "transactionSync">;
  private readonly reset: () => void;

  /**
   * `what`: names the object in the log line of a failed write. `reset`: drops the object's
   * in-memory state, so that it reloads what is stored (ctx.abort() would do it too, but its error
   * cannot be caught, which the test runtime reports as a failure of whatever test is running).
   */
  constructor(what: string, storage: Pick<DurableObjectStorage, "transactionSync">, reset: () => void) {
    this.what = what;
    this.storage = storage;
    this.reset = reset;
  }

  /**
   * Runs `write` at the end of the turn (or at the next flush), after the writes deferred before it.
   * `oneStatement`: `write` runs one SQL statement at most (see flush).
   */
  defer(write: () => void, oneStatement = false): void {
    this.open = null;
    this.lone = this.writes.length === 0 && oneStatement;
    this.writes.push(write);
    if (!this.settle) {
      let resolve!: () => void;
      let reject!: (err: unknown) => void;
      const promise = new Promise<void>((res, rej) => ((resolve = res), (reject = rej)));
      promise.catch(() => undefined); // awaited by the callers that care; logged in flush
      this.settle = { promise, resolve, reject };
    }
    this.timer ??= setTimeout(() => {
      this.timer = null;
      this.flush();
    }, 0);
  }

  /**
   * Defers `row` to be written by `batch` with the rows deferred right before it for the same
   * `batch` (the same function): one call, so one statement for many rows where `batch` can make
   * one. Only rows with no other write between them share a call, so the writes still run in the
   * order they were deferred.
   */
  deferRow<T>(batch: (rows: T[]) => void, row: T): void {
    if (this.open?.batch === batch) {
      this.open.rows.push(row);
      return;
    }
    const rows = [row];
    this.defer(() => batch(rows));
    this.open = { batch, rows };
  }

  /**
   * Settles once the writes deferred so far are written (null: none are waiting); rejects when one
   * failed, so their callers answer with a failure and their owners send them again.
   */
  get written(): Promise<void> | null {
    return this.settle?.promise ?? null;
  }

  /**
   * Runs the deferred writes now, in order, all or none. A failure resets the object's memory: it
   * already holds what every caller of the batch meant to store, so it must reload what is stored,
   * or an owner's resend would be taken for a repeat of what was never written.
   */
  flush(): void {
    const settle = this.settle;
    if (!settle) return;
    this.settle = null;
    this.open = null;
    const writes = this.writes.splice(0);
    const lone = this.lone;
    this.lone = false;
    try {
      // One statement is all or none by itself: no explicit transaction around it (a savepoint and
      // its release, a commit of its own). Alone it commits with the event's implicit transaction,
      // as the feature skeleton's writes do; either way the output gate holds the answers until
      // the write is durable.
      if (lone) writes[0]!();
      else {
        this.storage.transactionSync(() => {
          for (const w of writes) w();
        });
      }
      settle.resolve();
    } catch (err) {
      LOG.error("deferred writes failed, reloading what is stored", { object: this.what, error: err });
      this.reset();
      settle.reject(err);
    }
  }
}
