// The driver's start-up look at the sandbox's init (sandbox-init-check.ts), run on files of its
// own: the init's image passes; a program that exits at once, as the init does when a step fails
// (close_range on a kernel before 5.9), is said to need Linux 5.9; a file that cannot be exec'd is
// said so. (A noexec data dir for real: test/controllers/drivers/local/init-noexec.test.ts.)
import { chmodSync, copyFileSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { release, tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { SANDBOX_INIT_MODE, sandboxInitImage } from "../../../../../controllers/drivers/local/sandbox-init.ts";
import { sandboxInitUnusable } from "../../../../../controllers/drivers/local/sandbox-init-check.ts";

const dir = mkdtempSync(join(tmpdir(), "init-check-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("the look at the sandbox's init", () => {
  it("passes the init's image (x86-64)", () => {
    const file = join(dir, "sandbox-init");
    writeFileSync(file, sandboxInitImage("x64")!);
    chmodSync(file, SANDBOX_INIT_MODE);
    expect(sandboxInitUnusable(file)).toBeUndefined();
  });

  it("says an init that exits at its start needs Linux 5.9", () => {
    const file = join(dir, "exits");
    copyFileSync("/bin/false", file);
    chmodSync(file, 0o755);
    expect(sandboxInitUnusable(file)).toBe(`${file} failed its first steps: it needs Linux 5.9 or later (close_range), this is ${release()}`);
  });

  it("says a file that cannot be executed cannot be", () => {
    const file = join(dir, "not-executable");
    writeFileSync(file, sandboxInitImage("x64")!);
    chmodSync(file, 0o600);
    // Root may exec only a file with an execute bit: refused as on a noexec mount (EACCES).
    expect(sandboxInitUnusable(file)).toMatch(/cannot be executed \(Permission denied\): is the data dir on a file system mounted noexec\?$/);
  });
});
