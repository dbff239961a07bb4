// Batches of the agent link's items and of a pool's ClusterDO.enqueue calls: at most `count` items
// and at most `bytes` of them serialized, so a batch of large items (long network rules and
// labels, secret values, observations with long condition messages) stays under workerd's 32 MiB
// limit on RPC arguments and on a received WebSocket message, with margin. Always at least one item,
// so a single item larger than the cap still leaves (the schemas bound each far below it). Pure.

/** 8 MiB: a quarter of workerd's limits (structured clone sizes differ from JSON's a little). */
export const ENQUEUE_MAX_BYTES = 8 << 20;
/** The same cap on one agent link frame, either way. */
export const FRAME_MAX_BYTES = ENQUEUE_MAX_BYTES;

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

/** All of `items` in consecutive enqueueBatch batches (the link's frames), in order. */
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
