// The sandbox's init (sandbox-init.ts, README.md "The sandbox's pid 1") run directly on the host:
// it starts no sandbox and only pauses, so what the holder relies on is seen without bwrap. Root
// reads the descriptors of a process that is not dumpable, and the image is x86-64's: off either,
// these fail (as pid1-init.test.ts does), never skip. And how the driver tells an adopted holder's
// pid 1 is the init: by the file it runs, not by its name, which a process sets itself.
import { spawn, type ChildProcess } from "node:child_process";
import { chmodSync, copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, describe, expect, it } from "vitest";
import { holderStatus, ignoresSigchld, procRef } from "../../../../controllers/drivers/local/holder.ts";
import { SANDBOX_INIT_MODE, sandboxInitImage } from "../../../../controllers/drivers/local/sandbox-init.ts";

const dir = mkdtempSync(join(tmpdir(), "sandbox-init-"));
const file = join(dir, "sandbox-init");
writeFileSync(file, sandboxInitImage("x64")!);
chmodSync(file, SANDBOX_INIT_MODE);
const started: ChildProcess[] = [];
afterAll(() => {
  for (const p of started) p.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});

describe("the sandbox's init, run on the host", () => {
  it("runs here: as root, on x86-64", () => {
    expect(process.getuid?.()).toBe(0);
    expect(process.arch).toBe("x64");
  });

  it("run, it is named init, ignores SIGCHLD, holds no descriptor, and pauses; the driver knows it by its file", async () => {
    expect([process.arch, process.getuid?.()]).toEqual(["x64", 0]);
    // An extra descriptor besides stdio, as bwrap leaves its --userns one: it must be closed.
    const p = spawn(file, [], { stdio: ["ignore", "ignore", "ignore", "pipe"] });
    started.push(p);
    const status = () => readFileSync(`/proc/${p.pid}/status`, "utf8");
    const deadline = Date.now() + 5000;
    while (!ignoresSigchld(status()) && Date.now() < deadline) await sleep(5);
    expect(ignoresSigchld(status())).toBe(true);
    expect(/^Name:\t(.*)$/m.exec(status())?.[1]).toBe("init");
    expect(/^SigCgt:\s*0+$/m.test(status())).toBe(true);
    expect(readdirSync(`/proc/${p.pid}/fd`)).toEqual([]);
    expect(/^State:\s*S/m.test(status())).toBe(true);
    expect(p.exitCode).toBeNull();
    expect(holderStatus(procRef(p.pid!)!, file)?.init).toBe(true);
  });

  // An older agent's holder has bwrap as pid 1, which root inside can ptrace and rename (as an
  // exec of any file named `init` would): a process named init that runs another file is not it.
  it("a process named init that runs another file is not the init", async () => {
    const impostor = join(dir, "init");
    copyFileSync("/bin/sleep", impostor);
    chmodSync(impostor, 0o755);
    const p = spawn(impostor, ["1000"], { stdio: "ignore" });
    started.push(p);
    const name = () => /^Name:\t(.*)$/m.exec(readFileSync(`/proc/${p.pid}/status`, "utf8"))?.[1];
    const deadline = Date.now() + 5000;
    while (name() !== "init" && Date.now() < deadline) await sleep(5);
    expect(name()).toBe("init");
    expect(holderStatus(procRef(p.pid!)!, file)?.init).toBe(false);
  });
});
