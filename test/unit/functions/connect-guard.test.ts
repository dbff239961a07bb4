import { describe, expect, it } from "vitest";
import { guardConnectStream } from "../../../functions/gateway/connect-guard.ts";

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

  it("appends an end-stream error when the upstream ends early", async () => {
    const got = await envelopes(guardConnectStream(streamOf([env(0, { event: { data: {} } })])));
    expect(got.at(-1)).toEqual({ flags: 2, body: { error: { code: "unknown", message: "Network connection lost (gateway)" } } });
  });

  it("drops a torn envelope and appends the error when the upstream fails", async () => {
    const whole = env(0, { n: 1 });
    const torn = env(0, { n: 2 }).subarray(0, 7);
    const got = await envelopes(guardConnectStream(streamOf([whole, torn], true)));
    expect(got).toEqual([
      { flags: 0, body: { n: 1 } },
      { flags: 2, body: { error: { code: "unknown", message: "Network connection lost (gateway)" } } },
    ]);
  });
});
