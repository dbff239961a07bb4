// The per-sandbox budget of MCP body bytes the L7 handler holds at once (held-bytes.ts): a share
// takes bytes while they fit, grows and shrinks (an SSE event's pending part), gives all back once;
// sandboxes do not share a budget.
import { describe, expect, it } from "vitest";
import { HeldBytes } from "../../../controllers/traffic/l7/held-bytes.ts";

describe("HeldBytes", () => {
  it("takes while the sandbox's budget holds, per sandbox, and gives back once", () => {
    const h = new HeldBytes(100);
    const a = h.hold("s");
    const b = h.hold("s");
    expect(a.take(60)).toBe(true);
    expect(b.take(50)).toBe(false);
    expect(h.held("s")).toBe(60);
    expect(h.hold("t").take(100)).toBe(true);
    expect(b.take(40)).toBe(true);
    expect(h.held("s")).toBe(100);
    a.release();
    a.release();
    expect(h.held("s")).toBe(40);
    // An SSE share: grows within the budget, shrinks always.
    expect(a.set(70)).toBe(false);
    expect(a.set(60)).toBe(true);
    expect(a.set(5)).toBe(true);
    expect(h.held("s")).toBe(45);
    a.release();
    b.release();
    expect(h.held("s")).toBe(0);
  });
});
