// A pool's enqueue batches are capped by serialized bytes as well as by count: 2,000 intents of
// ~20 KB each (long labels, allow lists) are 40 MB, past workerd's 32 MiB limit on RPC arguments, which a
// count cap alone sent in one call. The ClusterDO's `intents` frames to the agent are cut the same
// way (`batches`, 256 and 8 MiB): 256 intents carrying ~60 KB of secret values each were one 15 MB
// frame.
import { expect, it } from "vitest";
import { batches, ENQUEUE_MAX_BYTES, enqueueBatch, jsonBytes } from "../../../../schema/protocol/batches.ts";

const RPC_LIMIT = 32 << 20;
const intent = (i: number, kb: number) => ({ sandboxId: `sbx-${i}`, labels: { note: String(i).padEnd(kb * 1024, "x") } });


it("keeps every batch of large intents under the RPC limit, in order, none lost", () => {
  const all = Array.from({ length: 2_000 }, (_, i) => intent(i, 20));
  expect(all.reduce((n, x) => n + jsonBytes(x), 0)).toBeGreaterThan(RPC_LIMIT);
  const bs = batches(all, 2_000);
  expect(bs.length).toBeGreaterThan(1);
  for (const b of bs) expect(b.reduce((n, x) => n + jsonBytes(x), 0)).toBeLessThanOrEqual(ENQUEUE_MAX_BYTES);
  expect(bs.flat().map((x) => x.sandboxId)).toEqual(all.map((x) => x.sandboxId));
});

it("small intents are capped by count; one intent larger than the byte cap still leaves alone", () => {
  const small = Array.from({ length: 5_000 }, (_, i) => ({ sandboxId: `sbx-${i}` }));
  expect(batches(small, 2_000).map((b) => b.length)).toEqual([2_000, 2_000, 1_000]);
  const huge = { sandboxId: "big", blob: "x".repeat(100) };
  expect(enqueueBatch([huge, { sandboxId: "next" }], 10, 50)).toEqual([huge]);
  expect(enqueueBatch([], 10)).toEqual([]);
});

it("the ClusterDO's intents frames: at most 256 intents and 8 MiB each, in order, none lost", () => {
  const all = Array.from({ length: 600 }, (_, i) => intent(i, 60));
  const frames = batches(all, 256);
  expect(frames.length).toBeGreaterThan(Math.ceil(600 / 256));
  for (const f of frames) {
    expect(f.length).toBeLessThanOrEqual(256);
    expect(f.reduce((n, x) => n + jsonBytes(x), 0)).toBeLessThanOrEqual(ENQUEUE_MAX_BYTES);
  }
  expect(frames.flat().map((x) => x.sandboxId)).toEqual(all.map((x) => x.sandboxId));
  expect(batches([], 256)).toEqual([]);
});
