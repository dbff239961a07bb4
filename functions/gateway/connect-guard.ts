// Keeps Connect server streams honest across the gateway.
//
// A stream is forwarded in whole envelopes only. When the upstream dies mid-stream (the sandbox
// was killed, its runtime went away) and no end-stream envelope came, the client's response is
// cut the way E2B's proxy cuts it: the body errors, so workerd closes the connection without the
// chunked terminator and the SDK sees a transport error (undici's "terminated", pyqwest's
// ReadError). Both SDKs then probe /health, get the gateway's 502 "not found" and report the
// sandbox as killed (JS: TimeoutError "killed or reached its end of life"; Python:
// SandboxNotRunningException). A well-formed end-stream error would instead reach Python as
// SandboxException "unknown". The caller may name an end-stream envelope for a cut stream
// instead (the gateway's, when the sandbox's agent itself went away: agent-unavailable.ts).

export const END_STREAM = 0x02;
const HEADER = 5;
/** The largest envelope passed on: process output and watch events are a few KiB each. */
export const MAX_ENVELOPE_BYTES = 16 << 20;

/** The reason the client's response is cut with (it never reaches the client: only the cut does). */
export class StreamCut extends Error {
  constructor() {
    super("the sandbox's stream ended without its end-stream message");
  }
}

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
 * envelope to append when the upstream is cut (undefined, or none given: the response is cut).
 */
export function guardConnectStream(upstream: ReadableStream<Uint8Array>, endWhenCut?: () => Promise<Uint8Array | undefined>): ReadableStream<Uint8Array> {
  const reader = upstream.getReader();
  /** The chunks of a torn envelope, held back until the rest of it comes, and their bytes. */
  let held: Uint8Array[] = [];
  let heldBytes = 0;
  /** The bytes `held` must reach before anything can be passed on: a header, then its envelope. */
  let need = HEADER;
  let ended = false;

  /**
   * The complete envelopes of what is held and `chunk`; the bytes after them are held. A chunk
   * that is whole envelopes (the usual case: the runtime writes one event at a time) is passed on
   * as it is, with no copy; a torn envelope's chunks are only collected until it is whole, then
   * copied once (not once per chunk: a large envelope dribbled in small chunks stays linear).
   * Throws StreamCut for an envelope past MAX_ENVELOPE_BYTES: the runtime's bytes are the
   * tenant's (a pod's runtime runs beside its code), and nothing the SDK reads is that large.
   */
  const completeEnvelopes = (chunk: Uint8Array): Uint8Array | null => {
    if (heldBytes + chunk.length < need) {
      held.push(chunk);
      heldBytes += chunk.length;
      return null;
    }
    let bytes = chunk;
    if (heldBytes) {
      bytes = new Uint8Array(heldBytes + chunk.length);
      let at = 0;
      for (const h of held) {
        bytes.set(h, at);
        at += h.length;
      }
      bytes.set(chunk, at);
    }
    let offset = 0;
    need = HEADER;
    while (bytes.length - offset >= HEADER) {
      const len = new DataView(bytes.buffer, bytes.byteOffset + offset).getUint32(1);
      if (len > MAX_ENVELOPE_BYTES) throw new StreamCut();
      if (bytes.length - offset < HEADER + len) {
        need = HEADER + len;
        break;
      }
      if (bytes[offset]! & END_STREAM) ended = true;
      offset += HEADER + len;
    }
    const rest = bytes.length - offset;
    // A torn tail is copied: the bytes passed on must not share a buffer with bytes still held.
    held = rest === 0 ? [] : [offset === 0 ? bytes : bytes.slice(offset)];
    heldBytes = rest;
    if (offset === 0) return null;
    return rest === 0 ? bytes : bytes.subarray(0, offset);
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
          if (!ended) {
            const end = await endWhenCut?.();
            if (!end) return controller.error(new StreamCut());
            controller.enqueue(end);
          }
          controller.close();
          return;
        }
        let out: Uint8Array | null;
        try {
          out = completeEnvelopes(result.value);
        } catch (err) {
          await reader.cancel(err).catch(() => {});
          return controller.error(err);
        }
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
