// The runtime's record of open terminal masters (controllers/runtime/process/terminal-masters.ts):
// a terminal whose master closed before its exit was reported must not, when that report comes,
// untrack a newer terminal that got the same descriptor number (review s33 H1: from then on every
// command and terminal held the newer, root's, master).
import { describe, expect, it } from "vitest";
import { mastersOpen, stdioWithoutMasters, trackMaster } from "../../../controllers/runtime/process/terminal-masters.ts";

describe("terminal masters", () => {
  it("a reused descriptor number stays tracked when the earlier terminal's end is reported", () => {
    const firstClosed = trackMaster(40);
    // The first master is gone (its command lives on); a new terminal gets number 40 again.
    const secondClosed = trackMaster(40);
    firstClosed();
    expect(mastersOpen()).toBe(1);
    const slots = stdioWithoutMasters(["ignore", "pipe", "pipe"]) as unknown[];
    expect(typeof slots[40]).toBe("number");
    secondClosed();
    expect(mastersOpen()).toBe(0);
    expect(stdioWithoutMasters(["ignore", "pipe", "pipe"])).toEqual(["ignore", "pipe", "pipe"]);
  });

  it("refuses a terminal whose master cannot be told", () => {
    expect(() => trackMaster(undefined)).toThrow(/cannot tell/);
    expect(() => trackMaster(2)).toThrow(/cannot tell/);
  });
});
