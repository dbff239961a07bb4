// The edge reads a sandbox's answer (its runtime's, a hook's or probe's port) only up to a bound:
// on Kubernetes the runtime is the pod's, beside the tenant's code (review24 edge F8).
import { describe, expect, it } from "vitest";
import { readBounded } from "../../../durable-objects/ingress-client.ts";

/** A body of `chunks` chunks of 64 KiB each, counting how many were pulled and whether it was cancelled. */
function endless(chunks: number) {
  const seen = { pulled: 0, cancelled: false };
  const body = new ReadableStream<Uint8Array>({
    pull(c) {
      if (seen.pulled === chunks) return c.close();
      seen.pulled++;
      c.enqueue(new Uint8Array(64 << 10).fill(0x61));
    },
    cancel() {
      seen.cancelled = true;
    },
  });
  return { res: new Response(body), seen };
}

describe("readBounded", () => {
  it("keeps the first `max` bytes of a longer answer and stops reading it", async () => {
    const { res, seen } = endless(10_000);
    const got = await readBounded(res, 100_000);
    expect(got.length).toBe(100_000);
    expect(seen.cancelled).toBe(true);
    expect(seen.pulled).toBeLessThan(10);
  });

  it("reads a shorter answer whole, and 1 MiB by default", async () => {
    expect((await readBounded(endless(2).res, 1 << 20)).length).toBe(128 << 10);
    expect((await readBounded(endless(10_000).res)).length).toBe(1 << 20);
    expect((await readBounded(new Response(null))).length).toBe(0);
  });
});
