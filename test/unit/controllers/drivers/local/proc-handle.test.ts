// The /proc handle a host helper reaches a sandbox's pid 1 through (proc-handle.ts): it answers for
// the process it was opened on while that one lives, and for nothing once it has ended, neither
// as a zombie (whose root and namespaces no longer answer) nor after it is reaped (when its pid
// may be anyone's). A child `sleep` stands in for pid 1: no root needed.
import { spawn } from "node:child_process";
import { closeSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { once } from "node:events";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { procRef } from "../../../../../controllers/drivers/local/holder.ts";
import { fieldsEnded, handleIs, openProc, PF_EXITING, statFieldsIn } from "../../../../../controllers/drivers/local/proc-handle.ts";

let dir = "";
beforeEach(() => void (dir = mkdtempSync(join(tmpdir(), "proc-handle-"))));
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** The kernel's state letter of `pid` (field 3), read by pid; undefined once reaped. */
function state(pid: number): string | undefined {
  try {
    return statFieldsIn(readFileSync(`/proc/${pid}/stat`, "latin1"))?.[0];
  } catch {
    return undefined;
  }
}

/** A stat line as the kernel writes it, for a process named `comm` in state `st` with `flags`. */
function line(comm: string, st = "S", flags = 4194560, start = "123456"): string {
  const after = [st, "1", "2", "3", "0", "-1", String(flags), ...Array(12).fill("0"), start, "9", "10"];
  return `4242 (${comm}) ${after.join(" ")}\n`;
}

describe("statFieldsIn / fieldsEnded: the one parse of /proc/<pid>/stat and the one 'ended'", () => {
  // The name is the process's own choice (its executable's base name, or prctl PR_SET_NAME): up to
  // 15 bytes the kernel keeps, with any byte but NUL, so ")", spaces and newlines.
  const hostile = [")", "))", "a) Z 1 2 3", ") X 0 0", "x\ny) Z", "sp a ce", " ", "(", "0123456789abcdef", "\n) R 1 (\n"];
  it.each(hostile)("a name %j: the state, flags and start are the kernel's, not the name's", (comm) => {
    const f = statFieldsIn(line(comm))!;
    expect(f[0]).toBe("S");
    expect(f[19]).toBe("123456");
    expect(fieldsEnded(f)).toBe(false);
  });

  it("ended: a zombie, a dead one, or one exiting (PF_EXITING, whatever its state letter); not one running, sleeping or stopped", () => {
    for (const st of ["R", "S", "D", "T", "t", "I"]) expect(fieldsEnded(statFieldsIn(line(")", st))!)).toBe(false);
    expect(fieldsEnded(statFieldsIn(line(")", "Z"))!)).toBe(true);
    expect(fieldsEnded(statFieldsIn(line(")", "X"))!)).toBe(true);
    expect(fieldsEnded(statFieldsIn(line("a) S 1", "S", 4194560 | PF_EXITING))!)).toBe(true);
  });

  it("no stat line (no ')', cut short): undefined, not fields", () => {
    expect(statFieldsIn("")).toBeUndefined();
    expect(statFieldsIn("4242 (sleep")).toBeUndefined();
    expect(statFieldsIn("4242 (sleep) S 1 2")).toBeUndefined();
  });

  it("real processes named with ')', spaces, a newline and 16 bytes: their own state and start", async () => {
    for (const name of ["a) Z 1 2", "sp a ce", "n\ne) X", "0123456789abcdef"]) {
      const named = join(dir, name);
      symlinkSync("/bin/sleep", named);
      const child = spawn(named, ["30"], { stdio: "ignore" });
      try {
        const stat = readFileSync(`/proc/${child.pid}/stat`, "latin1");
        const f = statFieldsIn(stat)!;
        expect(f[0]).toMatch(/^[RS]$/);
        expect(f[19]).toBe(procRef(child.pid!)!.start);
        expect(fieldsEnded(f)).toBe(false);
      } finally {
        child.kill("SIGKILL");
        await once(child, "exit");
      }
    }
  });
});

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
