// The sandbox's init (sandbox-init.ts, README.md "The sandbox's pid 1"): a holder is ready once
// its pid 1 runs the init and has set SIGCHLD to SIG_IGN (holder.ts), which the kernel's status
// shows in `SigIgn`; an init that failed before that is a failed start, not a pid 1 that ended.
// The init run on the host (root, x64) is the local tier's: test/controllers/drivers/local/sandbox-init.test.ts.
import { describe, expect, it } from "vitest";
import { ignoresSigchld } from "../../../../../controllers/drivers/local/holder.ts";
import { sandboxInitImage } from "../../../../../controllers/drivers/local/sandbox-init.ts";

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

describe("the init's image", () => {
  it("is a 304-byte static x86-64 ELF (one R+X load of the whole file, a non-executable stack); none for other CPUs", () => {
    const image = sandboxInitImage("x64")!;
    expect(image.length).toBe(304);
    expect(image.subarray(0, 4).toString("latin1")).toBe("\x7fELF");
    expect([image[4], image[5], image.readUInt16LE(16), image.readUInt16LE(18)]).toEqual([2, 1, 2, 62]); // 64-bit, LE, ET_EXEC, x86-64
    expect(image.readBigUInt64LE(24)).toBe(0x4000b0n); // e_entry
    expect(image.readUInt16LE(56)).toBe(2); // e_phnum
    const ph = (i: number) => ({ type: image.readUInt32LE(64 + i * 56), flags: image.readUInt32LE(68 + i * 56), offset: image.readBigUInt64LE(72 + i * 56), filesz: image.readBigUInt64LE(96 + i * 56) });
    expect(ph(0)).toEqual({ type: 1, flags: 5, offset: 0n, filesz: 304n }); // PT_LOAD, R+X
    expect(ph(1)).toMatchObject({ type: 0x6474e551, flags: 6 }); // PT_GNU_STACK, RW
    expect(sandboxInitImage("arm64")).toBeUndefined();
  });
});
