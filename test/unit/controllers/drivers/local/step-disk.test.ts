// The size of a build step's disk (builder/sandbox.ts `stepDiskMB`): what is left of the build's
// bound, but never so much that the image full plus the layer copied off it would leave the host
// less than HOST_RESERVE_MB free.
import { describe, expect, it } from "vitest";
import { HOST_RESERVE_MB, stepDiskMB } from "../../../../../controllers/drivers/local/builder/sandbox.ts";

const MiB = 1024 * 1024;

describe("a build step's disk size", () => {
  it("is what is left of the build's bound on a roomy host", () => {
    expect(stepDiskMB(16384, 72 * 1024 * MiB)).toBe(16384);
    expect(stepDiskMB(300, 72 * 1024 * MiB)).toBe(300);
  });

  it("leaves the host its reserve with the image full and the layer copied off it", () => {
    const free = (HOST_RESERVE_MB + 1000) * MiB;
    expect(stepDiskMB(16384, free)).toBe(500);
    const mb = stepDiskMB(16384, 10 * 1024 * MiB);
    expect(10 * 1024 - 2 * mb).toBeGreaterThanOrEqual(HOST_RESERVE_MB);
  });

  it("is below any usable size when the host has only its reserve (the step is refused)", () => {
    expect(stepDiskMB(16384, HOST_RESERVE_MB * MiB)).toBeLessThanOrEqual(0);
  });
});
