// How many of a pool's pending intents go in one ClusterDO.enqueue call: at most `count`, and at
// most `bytes` of serialized intents, so a batch of large intents (long network rules, many
// labels) stays under workerd's 32 MiB limit on RPC arguments with margin. Always at least one,
// so a single intent larger than the cap still leaves (the edge bounds each intent far below it).
// Pure.

/** 8 MiB: a quarter of workerd's RPC limit (structured clone sizes differ from JSON's a little). */
export const ENQUEUE_MAX_BYTES = 8 << 20;

export function enqueueBatch<T>(items: readonly T[], count: number, bytes = ENQUEUE_MAX_BYTES, size: (item: T) => number = jsonBytes): T[] {
  const out: T[] = [];
  let total = 0;
  for (const item of items) {
    if (out.length >= count) break;
    const n = size(item);
    if (out.length > 0 && total + n > bytes) break;
    out.push(item);
    total += n;
  }
  return out;
}

/** All of `items` in consecutive enqueueBatch batches (ClusterDO's `intents` frames), in order. */
export function batches<T>(items: readonly T[], count: number, bytes = ENQUEUE_MAX_BYTES, size: (item: T) => number = jsonBytes): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; ) {
    const b = enqueueBatch(items.slice(i, i + count), count, bytes, size);
    out.push(b);
    i += b.length;
  }
  return out;
}

/** The UTF-8 length of `x` as JSON. */
export function jsonBytes(x: unknown): number {
  return utf8Bytes(JSON.stringify(x));
}

const ENCODER = new TextEncoder();
/** Reused for counting: a pool's refill sizes every intent it sends, and a fresh encoder and
 * buffer per intent were most of what that cost. Longer strings are encoded on their own. */
const SCRATCH = new Uint8Array(64 << 10);

/** The UTF-8 length of `s` (an item already encoded as JSON: sized without encoding it again). */
export function utf8Bytes(s: string): number {
  // At most 3 bytes per UTF-16 unit, so a string this short always fits the scratch buffer.
  if (s.length * 3 <= SCRATCH.length) return ENCODER.encodeInto(s, SCRATCH).written;
  return ENCODER.encode(s).length;
}
