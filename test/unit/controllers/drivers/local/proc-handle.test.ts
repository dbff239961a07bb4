// The /proc handle a host helper reaches a sandbox's pid 1 through (proc-handle.ts): it answers for
// the process it was opened on while that one lives, and for nothing once it has ended, neither
// as a zombie (whose root and namespaces no longer answer) nor after it is reaped (when its pid
// may be anyone's). A child `sleep` stands in for pid 1: no root needed.
import { spawn } from "node:child_process";
import { closeSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { once } from "node:events";
import { afterEach, describe, expect, it } from "vitest";
import { procRef } from "../../../../../controllers/drivers/local/holder.ts";
import { handleIs, openProc } from "../../../../../controllers/drivers/local/proc-handle.ts";

const dir = mkdtempSync(join(tmpdir(), "proc-handle-"));
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** The kernel's state letter of `pid` (field 3), read by pid; undefined once reaped. */
function state(pid: number): string | undefined {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, "latin1");
    return s.slice(s.lastIndexOf(")") + 2).split(" ")[0];
  } catch {
    return undefined;
  }
}

describe("openProc / handleIs", () => {
  it("answers for the live process it was opened on (a name with ') ' in it too), never for a zombie or a reaped one", async () => {
    // The name (comm) is the executable's base name: the process's own choice.
    const named = join(dir, "s) 1 2 R");
    symlinkSync("/bin/sleep", named);
    const child = spawn(named, ["30"], { stdio: "ignore" });
    const exited = once(child, "exit");
    try {
      const ref = procRef(child.pid!)!;
      expect(ref.start).toMatch(/^[0-9]+$/);
      const fd = openProc(ref)!;
      try {
        expect(fd).toBeTypeOf("number");
        expect(handleIs(fd, ref)).toBe(true);
        // Another start under the same pid (a reused pid) is not the recorded process.
        expect(handleIs(fd, { pid: ref.pid, start: String(Number(ref.start) + 1) })).toBe(false);
        expect(openProc({ pid: ref.pid, start: String(Number(ref.start) + 1) })).toBeUndefined();
        // Killed and not yet reaped (node reaps only when the loop runs, which this does not let
        // it do until the zombie is seen): state Z.
        child.kill("SIGKILL");
        const until = Date.now() + 5_000;
        while (state(child.pid!) !== "Z" && Date.now() < until);
        expect(state(child.pid!)).toBe("Z");
        expect(handleIs(fd, ref)).toBe(false);
        expect(openProc(ref)).toBeUndefined();
        // Reaped: every lookup under the handle fails.
        await exited;
        expect(handleIs(fd, ref)).toBe(false);
        expect(openProc(ref)).toBeUndefined();
      } finally {
        closeSync(fd);
      }
    } finally {
      child.kill("SIGKILL");
    }
  });
});
