// The edge's log lines: JSON objects with the request's trace id when they belong to a request
// (tracing off here: the id is still the caller's trace id, or a fresh one), none outside one.
import { afterEach, describe, expect, it, vi } from "vitest";
import { edgeLogger } from "../../../durable-objects/tracing/edge-log.ts";
import { startRequestSpan } from "../../../durable-objects/tracing/edge-tracing.ts";

afterEach(() => vi.restoreAllMocks());

describe("edge logs", () => {
  it("carry the trace id of the request they are written in, and fields after the fixed keys", async () => {
    const lines: string[] = [];
    vi.spyOn(console, "error").mockImplementation((l: string) => void lines.push(l));
    const log = edgeLogger("cluster");
    const req = startRequestSpan({}, "POST", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    expect(req.id).toBe("4bf92f3577b34da6a3ce929d0e0e4736");
    await req.run(async () => {
      await Promise.resolve();
      log.error("send failed", { error: new Error("gone"), msg: "not overwritten" });
    });
    log.error("outside");
    const [inside, outside] = lines.map((l) => JSON.parse(l));
    expect(inside).toMatchObject({ level: "error", msg: "send failed", component: "cluster", traceId: "4bf92f3577b34da6a3ce929d0e0e4736" });
    expect(inside.error).toMatch(/^Error: gone/);
    expect(Number.isNaN(Date.parse(inside.time))).toBe(false);
    expect(outside.traceId).toBeUndefined();
  });

  it("a request without a valid traceparent gets a fresh 32-hex id", () => {
    for (const tp of [null, "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"]) {
      const { id } = startRequestSpan({}, "GET", tp);
      expect(id).toMatch(/^[0-9a-f]{32}$/);
      expect(id).not.toBe("00000000000000000000000000000000");
    }
  });
});
