// Keeps Connect server streams honest across the gateway.
//
// When the upstream dies mid-stream, workerd ends the client's response cleanly (workerd#6818), so
// the SDK would see a stream without its end-stream frame and report a protocol error instead of
// a killed sandbox. This guard forwards whole envelopes only and, if the upstream errors or ends
// without an end-stream envelope, appends one carrying code `unknown` and a "Network connection
// lost" message: the SDK then probes /health, gets the gateway's 502 and reports the sandbox as
// killed or expired, exactly as it does against E2B. The caller may name another end for a cut
// stream (the gateway's, when the sandbox's agent itself went away: agent-unavailable.ts).

export const END_STREAM = 0x02;
const HEADER = 5;

const LOST = new TextEncoder().encode(JSON.stringify({ error: { code: "unknown", message: "Network connection lost (gateway)" } }));

export function envelope(flags: number, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(HEADER + payload.length);
  out[0] = flags;
  new DataView(out.buffer).setUint32(1, payload.length);
  out.set(payload, HEADER);
  return out;
}

export function isConnectStream(contentType: string | null): boolean {
  return !!contentType && contentType.startsWith("application/connect+");
}

/**
 * Wraps an upstream Connect stream body; see the module comment. `endWhenCut`: the end-stream
 * envelope to append when the upstream is cut (undefined, or none given: the "connection lost" one).
 */
export function guardConnectStream(upstream: ReadableStream<Uint8Array>, endWhenCut?: () => Promise<Uint8Array | undefined>): ReadableStream<Uint8Array> {
  const reader = upstream.getReader();
  let pending = new Uint8Array(0);
  let ended = false;

  const append = (chunk: Uint8Array) => {
    const merged = new Uint8Array(pending.length + chunk.length);
    merged.set(pending);
    merged.set(chunk, pending.length);
    pending = merged;
  };

  /** Splits off every complete envelope in `pending`. */
  const completeEnvelopes = (): Uint8Array | null => {
    let offset = 0;
    while (pending.length - offset >= HEADER) {
      const len = new DataView(pending.buffer, pending.byteOffset + offset).getUint32(1);
      if (pending.length - offset < HEADER + len) break;
      if (pending[offset]! & END_STREAM) ended = true;
      offset += HEADER + len;
    }
    if (offset === 0) return null;
    const done = pending.subarray(0, offset);
    pending = pending.slice(offset);
    return done;
  };

  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      for (;;) {
        let result: ReadableStreamReadResult<Uint8Array>;
        try {
          result = await reader.read();
        } catch {
          result = { done: true, value: undefined };
        }
        if (result.done) {
          if (!ended) controller.enqueue((await endWhenCut?.()) ?? envelope(END_STREAM, LOST));
          controller.close();
          return;
        }
        append(result.value);
        const out = completeEnvelopes();
        if (out) {
          controller.enqueue(out);
          return;
        }
      }
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  });
}
