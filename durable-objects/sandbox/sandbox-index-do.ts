// SandboxIndexDO: the sandbox groups' writer of the libSQL sandbox index (`idFromName("sandboxes")`;
// ClusterDO writes the create rows it carries the same way itself, directIndexWriter below).
// SandboxGroupDOs hand it their rows; it group-commits them: while one batch is in flight to libSQL,
// new rows queue, and the next batch carries all of them in one request. sqld takes ~500 single
// writes/s but ~9,000 batched rows/s, so this keeps the index off the create path's critical
// cost. A write resolves once its batch is committed, so a client's own change is listable when
// its reply arrives. Knob: MAX_BATCH rows per request. No storage: the sandbox groups own the truth
// and keep every op until it is confirmed here (their index outbox), sending it again after a
// failure, so an sqld outage delays rows but loses none. Every so often a batch also removes old
// tombstones (sandbox-index.ts).
import { DurableObject } from "cloudflare:workers";
import type { Env } from "../env.ts";
import { applyIndexBatch, TOMBSTONE_KEEP_MS, type IndexOp } from "../store/sandbox-index.ts";

export const INDEX_WRITER_NAME = "sandboxes";
const MAX_BATCH = 500;
/** How often a batch also sweeps old tombstones. */
const SWEEP_EVERY_MS = 60_000;

interface Queued {
  op: IndexOp;
  done: (r: IndexWriteResult) => void;
}

export type IndexWriteResult = { ok: true } | { ok: false; error: string };

/**
 * What this object does with one batch, done by the caller itself: ClusterDO writes the rows that
 * travel with creates this way, already batched by its own IndexQueue (one request in flight, the
 * rows queued meanwhile in the next), so they skip a Durable Object hop per batch. Rows are whole
 * and revision-guarded, so two writers racing cannot undo each other's newer rows.
 */
export function directIndexWriter(env: Pick<Env, "LIBSQL_URL" | "LIBSQL_AUTH_TOKEN">): { write(ops: IndexOp[]): Promise<IndexWriteResult> } {
  return {
    write: (ops) =>
      applyIndexBatch(env, ops).then(
        (): IndexWriteResult => ({ ok: true }),
        (err: unknown): IndexWriteResult => ({ ok: false, error: String(err) }),
      ),
  };
}

export class SandboxIndexDO extends DurableObject<Env> {
  private queue: Queued[] = [];
  private flushing = false;
  private sweptAt = 0;

  /** Queues the ops (in order) and resolves once their batch is committed. */
  write(ops: IndexOp[]): Promise<IndexWriteResult> {
    return new Promise((resolve) => {
      let left = ops.length;
      let failed: IndexWriteResult | null = null;
      const done = (r: IndexWriteResult) => {
        if (!r.ok) failed = r;
        if (--left === 0) resolve(failed ?? { ok: true });
      };
      if (left === 0) return resolve({ ok: true });
      for (const op of ops) this.queue.push({ op, done });
      if (!this.flushing) void this.flush();
    });
  }

  private async flush(): Promise<void> {
    this.flushing = true;
    try {
      while (this.queue.length > 0) {
        const batch = this.queue.splice(0, MAX_BATCH);
        let result: IndexWriteResult = { ok: true };
        const now = Date.now();
        const sweep = now - this.sweptAt >= SWEEP_EVERY_MS;
        try {
          await applyIndexBatch(this.env, batch.map((q) => q.op), sweep ? now - TOMBSTONE_KEEP_MS : undefined);
          if (sweep) this.sweptAt = now;
        } catch (err) {
          result = { ok: false, error: String(err) };
        }
        for (const q of batch) q.done(result);
      }
    } finally {
      this.flushing = false;
    }
  }
}
