// The built-image collection's decision (operations/image-gc.ts `dueFrees`): which claimed images
// go to the agent now, and when to look again.
import { describe, expect, it } from "vitest";
import { dueFrees, IMAGE_RECHECK_MS, imageGraceMs, IMAGE_FREE_GRACE_MS } from "../../../durable-objects/operations/image-gc.ts";

const GRACE = 1_000;
const free = (image: string, freedAt: number, standing = false, sentAt: number | null = null) => ({ image, freedAt, sentAt, standing });

describe("dueFrees", () => {
  it("keeps an image for the grace period after its claim, then sends it", () => {
    expect(dueFrees([free("b-a", 100)], new Set(), 1_099, GRACE)).toEqual({ send: [], nextAt: 1_100 });
    expect(dueFrees([free("b-a", 100)], new Set(), 1_100, GRACE)).toEqual({ send: ["b-a"], nextAt: null });
  });

  it("holds an image a sandbox of the cluster names, or a running build stands on, past its grace; looks again later", () => {
    const now = 10_000;
    const r = dueFrees([free("b-used", 0), free("b-base", 0, true), free("b-free", 0), free("b-new", now - 10)], new Set(["b-used"]), now, GRACE);
    expect(r.send).toEqual(["b-free"]);
    // The earliest of: the held ones' recheck, the young one's end of grace.
    expect(r.nextAt).toBe(Math.min(now + IMAGE_RECHECK_MS, now - 10 + GRACE));
  });

  it("sends again one sent before (a welcome's resend), whatever the clock says of its grace, unless a sandbox names it", () => {
    expect(dueFrees([free("b-a", 100, false, 1_200)], new Set(), 500, GRACE)).toEqual({ send: ["b-a"], nextAt: null });
    expect(dueFrees([free("b-a", 100, false, 1_200)], new Set(["b-a"]), 500, GRACE)).toEqual({ send: [], nextAt: 500 + IMAGE_RECHECK_MS });
  });

  it("nothing pending: nothing to send, no next look", () => {
    expect(dueFrees([], new Set(), 0, GRACE)).toEqual({ send: [], nextAt: null });
  });
});

describe("imageGraceMs", () => {
  it("is the var when it is a non-negative number, else the default", () => {
    expect(imageGraceMs({})).toBe(IMAGE_FREE_GRACE_MS);
    expect(imageGraceMs({ IMAGE_FREE_GRACE_MS: "0" })).toBe(0);
    expect(imageGraceMs({ IMAGE_FREE_GRACE_MS: "2500" })).toBe(2_500);
    expect(imageGraceMs({ IMAGE_FREE_GRACE_MS: "-1" })).toBe(IMAGE_FREE_GRACE_MS);
    expect(imageGraceMs({ IMAGE_FREE_GRACE_MS: "soon" })).toBe(IMAGE_FREE_GRACE_MS);
  });
});
