// Turns a push source (process output, directory events) into the pull stream a Connect
// server-streaming handler returns, adding keepalive messages while the source is quiet.
import type { RpcContext } from "./request-context.ts";

/** envd's default when the client sends no Keepalive-Ping-Interval. */
const DEFAULT_KEEPALIVE_S = 90;

/** The longest a Node timer waits; a longer one fires at once. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** Whole seconds, at least 1, as envd's ticker takes them: a tenant's `0.001` would otherwise
 * make one quiet stream send ~1000 keepalives a second (agent CPU every sandbox shares), and
 * an interval past Node's timer range would fire at once. */
export function keepaliveMs(ctx: RpcContext): number {
  const s = Number(ctx.requestHeader.get("keepalive-ping-interval") ?? undefined);
  const whole = Number.isFinite(s) && s > 0 ? Math.max(1, Math.floor(s)) : DEFAULT_KEEPALIVE_S;
  return Math.min(whole * 1000, MAX_TIMER_MS);
}

/** How many bytes of a source's items one stream queues before it asks the source to stop
 * producing: a client that stops reading must not make the agent hold a command's output. */
export const QUEUE_HIGH_WATER_BYTES = 1024 * 1024;

export interface Source<T> {
  /** Starts delivery; returns the detach function. `end` marks the last item. */
  subscribe(push: (item: T, end?: boolean) => void): () => void;
  /** Backpressure for a producer that can wait (a process's pipes): the stream calls `hold`
   * once its queue holds more than QUEUE_HIGH_WATER_BYTES of `sizeOf`, and the release it got
   * back once the queue is below half that, or when the stream ends. */
  hold?(): () => void;
  sizeOf?(item: T): number;
}

/** Yields items as they arrive and `keepalive()` after each quiet interval (the ticker restarts
 * whenever something is sent, as envd's does). Ends after the item pushed with `end`, or when
 * the request is cancelled or its deadline passes. */
export async function* withKeepalive<T>(ctx: RpcContext, source: Source<T>, keepalive: () => T): AsyncGenerator<T> {
  const interval = keepaliveMs(ctx);
  const queue: T[] = [];
  let queued = 0;
  let release: (() => void) | undefined;
  let ended = false;
  let wake: (() => void) | undefined;
  const detach = source.subscribe((item, end) => {
    queue.push(item);
    queued += source.sizeOf?.(item) ?? 0;
    if (queued > QUEUE_HIGH_WATER_BYTES && !release) release = source.hold?.();
    if (end) ended = true;
    wake?.();
  });
  const onAbort = () => wake?.();
  ctx.signal.addEventListener("abort", onAbort);
  try {
    for (;;) {
      while (queue.length) {
        const item = queue.shift()!;
        queued -= source.sizeOf?.(item) ?? 0;
        if (release && queued <= QUEUE_HIGH_WATER_BYTES / 2) {
          release();
          release = undefined;
        }
        yield item;
      }
      if (ended) return;
      if (ctx.signal.aborted) throw ctx.signal.reason;
      let timer: NodeJS.Timeout | undefined;
      const timedOut = await new Promise<boolean>((resolve) => {
        wake = () => resolve(false);
        timer = setTimeout(() => resolve(true), interval);
      });
      clearTimeout(timer);
      wake = undefined;
      if (timedOut && !queue.length && !ctx.signal.aborted) yield keepalive();
    }
  } finally {
    detach();
    release?.();
    ctx.signal.removeEventListener("abort", onAbort);
  }
}
