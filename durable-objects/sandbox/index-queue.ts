// Group commit of index ops toward SandboxIndexDO: ops pushed while a call is in flight leave
// together in the next one, in order, so one sandbox's writes never overtake each other. Used by
// each SandboxGroupDO for its sandboxes' ops, and by ClusterDO for the create ops that travel with
// an enqueue (see EnqueueOptions.index).
import type { IndexOp } from "../store/sandbox-index.ts";
import type { IndexWriteResult } from "./sandbox-index-do.ts";
import { edgeLogger } from "../tracing/edge-log.ts";

const LOG = edgeLogger("index");

/** Attempts of a batch after the first, and the pause before each (the default schedule). */
const RETRY_MS = [250, 1_000];

/** SandboxIndexDO's stub, or a writer doing its work in place (directIndexWriter). */
export interface IndexWriter {
  write(ops: IndexOp[]): Promise<IndexWriteResult>;
}

export class IndexQueue {
  private queue: { op: IndexOp; done: (committed: boolean) => void }[] = [];
  private flushing: Promise<void> | null = null;
  private readonly writer: () => IndexWriter;
  private readonly keepAlive: (p: Promise<unknown>) => void;
  private readonly retryMs: readonly number[];

  /**
   * `writer` is asked once per flush (tests swap it); `keepAlive` is the object's waitUntil;
   * `retryMs` the pauses before each further attempt of a failed batch.
   */
  constructor(writer: () => IndexWriter, keepAlive: (p: Promise<unknown>) => void, retryMs: readonly number[] = RETRY_MS) {
    this.writer = writer;
    this.keepAlive = keepAlive;
    this.retryMs = retryMs;
  }

  /**
   * Resolves once the op's batch is committed (true), or has failed its last attempt (false, and
   * logged; a sandbox group's outbox sends it again later).
   */
  push(op: IndexOp): Promise<boolean> {
    return new Promise((done) => {
      this.queue.push({ op, done });
      if (this.flushing) return;
      this.flushing = this.flush();
      this.keepAlive(this.flushing);
    });
  }

  private async flush(): Promise<void> {
    const writer = this.writer();
    for (;;) {
      // Checked and reset in the same turn as push(): an op queued now is never left behind.
      if (this.queue.length === 0) {
        this.flushing = null;
        return;
      }
      const batch = this.queue.splice(0);
      const ops = batch.map((q) => q.op);
      let committed = false;
      for (let attempt = 0; ; attempt++) {
        const error = await writer.write(ops).then((r) => (r.ok ? null : r.error), (err: unknown) => err);
        if (error === null) {
          committed = true;
          break;
        }
        if (attempt >= this.retryMs.length) {
          LOG.error("index write failed", { ops: batch.length, attempts: attempt + 1, error });
          break;
        }
        await new Promise((r) => setTimeout(r, this.retryMs[attempt]));
      }
      for (const q of batch) q.done(committed);
    }
  }
}
