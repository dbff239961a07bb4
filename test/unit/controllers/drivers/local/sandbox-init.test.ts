// The sandbox's init (sandbox-init.ts, README.md "The sandbox's pid 1"): a holder is ready once
// its pid 1 runs the init and has set SIGCHLD to SIG_IGN (holder.ts), which the kernel's status
// shows in `SigIgn`; an init that failed before that is a failed start, not a pid 1 that ended.
import { describe, expect, it } from "vitest";
import { ignoresSigchld } from "../../../../../controllers/drivers/local/holder.ts";

describe("a holder's readiness: SIGCHLD ignored", () => {
  it("reads SIGCHLD (17, bit 16) in SigIgn, and nothing else", () => {
    expect(ignoresSigchld("Name:\tinit\nSigIgn:\t0000000000010006\nSigCgt:\t0000000000000000\n")).toBe(true);
    expect(ignoresSigchld("Name:\tinit\nSigIgn:\t0000000000010000\n")).toBe(true);
    // SIGUSR1/2 (10, 12) and SIGINT/QUIT ignored, SIGCHLD not: the init has not got that far.
    expect(ignoresSigchld("Name:\tinit\nSigIgn:\t0000000000000a06\nSigCgt:\t0000000000010000\n")).toBe(false);
    expect(ignoresSigchld("Name:\tinit\nSigIgn:\t0000000000000000\n")).toBe(false);
    expect(ignoresSigchld("Name:\tinit\n")).toBe(false);
  });
});
