// The driver's start-up look at the sandbox's init (sandbox-init-check.ts), run on files of its
// own: the init's image passes; a program that exits at once, as the init does when a step fails
// (close_range on a kernel before 5.9), is said to need Linux 5.9; a file that cannot be exec'd is
// said so. Only those two causes say the init cannot run here: an exec that fails otherwise (a
// file held open for writing: ETXTBSY), an init killed by a signal, no answer in time are looked at
// once more and, still unsure, keep the init (the driver would otherwise downgrade every sandbox
// for the agent's life on a passing failure). (A noexec data dir for real:
// test/controllers/drivers/local/init-noexec.test.ts.)
import { chmodSync, closeSync, copyFileSync, mkdtempSync, openSync, rmSync, writeFileSync } from "node:fs";
import { release, tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { SANDBOX_INIT_MODE, sandboxInitImage } from "../../../../../controllers/drivers/local/sandbox-init.ts";
import { checkSandboxInit } from "../../../../../controllers/drivers/local/sandbox-init-check.ts";

const dir = mkdtempSync(join(tmpdir(), "init-check-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("the look at the sandbox's init", () => {
  it("passes the init's image (x86-64)", () => {
    const file = join(dir, "sandbox-init");
    writeFileSync(file, sandboxInitImage("x64")!);
    chmodSync(file, SANDBOX_INIT_MODE);
    expect(checkSandboxInit(file)).toEqual({});
  });

  it("is not turned by the agent's own environment (the helper gets helperEnv() only)", () => {
    const file = join(dir, "sandbox-init-env");
    writeFileSync(file, sandboxInitImage("x64")!);
    chmodSync(file, SANDBOX_INIT_MODE);
    const names = ["PERL5OPT", "LD_PRELOAD", "BASH_ENV", "NODE_OPTIONS"] as const;
    const saved = names.map((n) => process.env[n]);
    // Each would end or break a perl that read it: exit 3 reads as "needs Linux 5.9".
    Object.assign(process.env, { PERL5OPT: "-e'BEGIN{exit 3}'", LD_PRELOAD: "/nonexistent/evil.so", BASH_ENV: "/nonexistent", NODE_OPTIONS: "--require /nonexistent" });
    try {
      expect(checkSandboxInit(file)).toEqual({});
    } finally {
      names.forEach((n, i) => (saved[i] === undefined ? delete process.env[n] : (process.env[n] = saved[i])));
    }
  });

  it("says an init that exits at its start needs Linux 5.9", () => {
    const file = join(dir, "exits");
    copyFileSync("/bin/false", file);
    chmodSync(file, 0o755);
    expect(checkSandboxInit(file)).toEqual({ unusable: `${file} failed its first steps: it needs Linux 5.9 or later (close_range), this is ${release()}` });
  });

  it("says a file that cannot be executed cannot be", () => {
    const file = join(dir, "not-executable");
    writeFileSync(file, sandboxInitImage("x64")!);
    chmodSync(file, 0o600);
    // Root may exec only a file with an execute bit: refused as on a noexec mount (EACCES).
    expect(checkSandboxInit(file).unusable).toMatch(/cannot be executed \(Permission denied\): is the data dir on a file system mounted noexec\?$/);
  });

  it("keeps an init whose exec failed for another reason (ETXTBSY: the file open for writing)", () => {
    const file = join(dir, "busy");
    writeFileSync(file, sandboxInitImage("x64")!);
    chmodSync(file, SANDBOX_INIT_MODE);
    const writer = openSync(file, "r+");
    try {
      expect(checkSandboxInit(file)).toEqual({ unsure: `${file} could not be executed (Text file busy)` });
    } finally {
      closeSync(writer);
    }
  });

  it("keeps an init killed by a signal before its first steps (not its own exit status 1)", () => {
    const file = join(dir, "killed");
    writeFileSync(file, "#!/bin/sh\nkill -9 $$\n");
    chmodSync(file, 0o755);
    expect(checkSandboxInit(file)).toEqual({ unsure: `${file} ended before its first steps were seen, not by its own exit(1)` });
  });

  it("keeps an init that gives no answer within the bound", () => {
    const file = join(dir, "silent");
    writeFileSync(file, "#!/bin/sh\nexec sleep 30\n");
    chmodSync(file, 0o755);
    expect(checkSandboxInit(file, { ms: 200 })).toEqual({ unsure: `${file} did not start within 0.2 s` });
  });

  it("looks once more after a check that could not tell, and keeps the init that then runs", () => {
    const init = join(dir, "init-for-retry");
    writeFileSync(init, sandboxInitImage("x64")!);
    chmodSync(init, SANDBOX_INIT_MODE);
    const file = join(dir, "killed-once");
    const marker = join(dir, "killed-once.seen");
    writeFileSync(file, `#!/bin/sh\n[ -e ${marker} ] || { : > ${marker}; kill -9 $$; }\nexec ${init}\n`);
    chmodSync(file, 0o755);
    expect(checkSandboxInit(file)).toEqual({});
  });
});
