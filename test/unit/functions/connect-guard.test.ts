import { describe, expect, it } from "vitest";
import { guardConnectStream, MAX_ENVELOPE_BYTES, StreamCut } from "../../../functions/gateway/connect-guard.ts";

const enc = new TextEncoder();
function env(flags: number, json: unknown): Uint8Array {
  const p = enc.encode(JSON.stringify(json));
  const out = new Uint8Array(5 + p.length);
  out[0] = flags;
  new DataView(out.buffer).setUint32(1, p.length);
  out.set(p, 5);
  return out;
}
function streamOf(chunks: Uint8Array[], fail = false): ReadableStream<Uint8Array> {
  // Pull-based, so queued chunks are delivered before the failure (erroring in start() would
  // discard them).
  let i = 0;
  return new ReadableStream({
    pull(c) {
      if (i < chunks.length) c.enqueue(chunks[i++]!);
      else if (fail) c.error(new Error("upstream reset"));
      else c.close();
    },
  });
}
async function envelopes(s: ReadableStream<Uint8Array>): Promise<{ flags: number; body: unknown }[]> {
  const bytes = new Uint8Array(await new Response(s).arrayBuffer());
  const out = [];
  for (let o = 0; o < bytes.length; ) {
    const len = new DataView(bytes.buffer, o).getUint32(1);
    out.push({ flags: bytes[o]!, body: JSON.parse(new TextDecoder().decode(bytes.subarray(o + 5, o + 5 + len))) });
    o += 5 + len;
  }
  return out;
}

/** The envelopes read before the stream errored, and the error. */
async function readUntilError(s: ReadableStream<Uint8Array>): Promise<{ got: { flags: number; body: unknown }[]; error: unknown }> {
  const reader = s.getReader();
  const chunks: Uint8Array[] = [];
  for (;;) {
    try {
      const r = await reader.read();
      if (r.done) return { got: await envelopes(streamOf(chunks)), error: undefined };
      chunks.push(r.value);
    } catch (error) {
      return { got: await envelopes(streamOf(chunks)), error };
    }
  }
}

describe("guardConnectStream", () => {
  it("passes a complete stream through unchanged, even split mid-envelope", async () => {
    const a = env(0, { event: { start: { pid: 1 } } });
    const end = env(2, {});
    const joined = new Uint8Array([...a, ...end]);
    const got = await envelopes(guardConnectStream(streamOf([joined.subarray(0, 3), joined.subarray(3, 12), joined.subarray(12)])));
    expect(got).toEqual([
      { flags: 0, body: { event: { start: { pid: 1 } } } },
      { flags: 2, body: {} },
    ]);
  });

  it("passes whole envelopes on as they come and holds back only a torn one's bytes", async () => {
    const [a, b, end] = [env(0, { n: 1 }), env(0, { n: 2 }), env(2, {})];
    const joined = new Uint8Array([...a, ...b, ...end]);
    // a whole and b torn; b's rest and the end together.
    const cut = a.length + 4;
    const reader = guardConnectStream(streamOf([joined.subarray(0, cut), joined.subarray(cut)])).getReader();
    const first = await reader.read();
    expect([...first.value!]).toEqual([...a]);
    const second = await reader.read();
    expect([...second.value!]).toEqual([...b, ...end]);
    expect((await reader.read()).done).toBe(true);
  });

  it("passes a large envelope dribbled in small chunks on whole, once it is complete", async () => {
    const big = env(0, { event: { data: { stdout: "x".repeat(1 << 20) } } });
    const end = env(2, {});
    const joined = new Uint8Array([...big, ...end]);
    const chunks: Uint8Array[] = [];
    for (let o = 0; o < joined.length; o += 1000) chunks.push(joined.subarray(o, o + 1000));
    const reader = guardConnectStream(streamOf(chunks)).getReader();
    const first = await reader.read();
    // Nothing before the envelope is whole: the first bytes out are all of it.
    expect(first.value!.length).toBeGreaterThanOrEqual(big.length);
    const all = [first.value!];
    for (let r = await reader.read(); !r.done; r = await reader.read()) all.push(r.value);
    expect(Buffer.concat(all).equals(Buffer.from(joined))).toBe(true);
  });

  it("cuts the response at an envelope that says it is larger than the gateway passes on (the runtime's bytes are the tenant's)", async () => {
    const header = new Uint8Array(5);
    new DataView(header.buffer).setUint32(1, MAX_ENVELOPE_BYTES + 1);
    const { got, error } = await readUntilError(guardConnectStream(streamOf([env(0, { n: 1 }), header, new Uint8Array(1000)])));
    expect(got).toEqual([{ flags: 0, body: { n: 1 } }]);
    expect(error).toBeInstanceOf(StreamCut);
  });

  it("cuts the response (the body errors, no end-stream envelope) when the upstream ends early", async () => {
    const { got, error } = await readUntilError(guardConnectStream(streamOf([env(0, { event: { data: {} } })])));
    expect(got).toEqual([{ flags: 0, body: { event: { data: {} } } }]);
    expect(error).toBeInstanceOf(StreamCut);
  });

  it("drops a torn envelope and cuts the response when the upstream fails", async () => {
    const whole = env(0, { n: 1 });
    const torn = env(0, { n: 2 }).subarray(0, 7);
    const { got, error } = await readUntilError(guardConnectStream(streamOf([whole, torn], true)));
    expect(got).toEqual([{ flags: 0, body: { n: 1 } }]);
    expect(error).toBeInstanceOf(StreamCut);
  });

  it("ends with the caller's end-stream envelope when it names one for a cut stream", async () => {
    const end = env(2, { error: { code: "aborted", message: "agent away" } });
    const got = await envelopes(guardConnectStream(streamOf([env(0, { n: 1 })], true), async () => end));
    expect(got).toEqual([
      { flags: 0, body: { n: 1 } },
      { flags: 2, body: { error: { code: "aborted", message: "agent away" } } },
    ]);
  });
});
