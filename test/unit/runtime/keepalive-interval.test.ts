// The Keepalive-Ping-Interval a tenant sends: whole seconds, at least one, as envd's ticker, and
// never past what a Node timer can wait (a longer timer fires at once).
import { describe, expect, it } from "vitest";
import { keepaliveMs, MAX_TIMER_MS } from "../../../controllers/runtime/event-stream.ts";
import type { RpcContext } from "../../../controllers/runtime/request-context.ts";

const ctx = (v: string | null) => ({ requestHeader: { get: () => v } }) as unknown as RpcContext;

describe("keepaliveMs", () => {
  it.each([
    [null, 90_000],
    ["50", 50_000],
    ["2.7", 2_000],
    ["0.001", 1_000],
    ["0.5", 1_000],
    ["0", 90_000],
    ["-3", 90_000],
    ["soon", 90_000],
    ["1e12", MAX_TIMER_MS],
  ])("%s -> %i ms", (header, ms) => {
    expect(keepaliveMs(ctx(header))).toBe(ms);
  });
});
