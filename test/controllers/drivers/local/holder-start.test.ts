// The holder's start (holder.ts startHolder) with the init as the sandbox's pid 1: the start
// waits for the init's own first steps, told by the end of bwrap's info socket (a second
// descriptor of it passes through bwrap into the init, whose close_range closes it) and decided by
// the same look at /proc as before. What a user would notice if that went wrong: a start that
// passes with an init that failed (a sandbox that then restarts in a loop instead of a create that
// fails), or a descriptor of the host's start left inside the sandbox, where its tenant's
// processes inherit it. bwrap gets the host's `/` read-only here: no sandbox root is needed to see
// either.
import { chmodSync, copyFileSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { alive, startHolder, type StartedHolder } from "../../../../controllers/drivers/local/holder.ts";
import { SANDBOX_INIT_MODE, sandboxInitImage } from "../../../../controllers/drivers/local/sandbox-init.ts";
import { Spawner } from "../../../../controllers/drivers/local/spawner.ts";

const dir = mkdtempSync(join(tmpdir(), "holder-start-"));
const init = join(dir, "sandbox-init");
writeFileSync(init, sandboxInitImage("x64")!);
chmodSync(init, SANDBOX_INIT_MODE);
/** An "init" that fails at once, as the init does when a first step fails (its exit status 1). */
const failing = join(dir, "false");
copyFileSync("/bin/false", failing);
chmodSync(failing, 0o755);
const spawner = new Spawner();
const started: StartedHolder[] = [];
afterAll(async () => {
  for (const s of started) for (const ref of [s.nsInit, s.holder]) if (alive(ref)) process.kill(ref.pid, "SIGKILL");
  await spawner.dispose();
  rmSync(dir, { recursive: true, force: true });
});

const BWRAP = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--chdir", "/"];
let n = 0;
const start = async (opts: { init?: string }) => {
  const s = await startHolder({ id: `hs${process.pid}x${n++}`, bwrapArgs: BWRAP, cgroupProcs: [], cwd: dir, log: join(dir, `log-${n}`), ...opts }, spawner);
  started.push(s);
  return s;
};

/** The targets of a process's descriptors (`socket:[…]`, paths). */
const descriptors = (pid: number) => readdirSync(`/proc/${pid}/fd`).map((fd) => readlinkSync(`/proc/${pid}/fd/${fd}`));
const children = (pid: number) => readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").split(" ").filter(Boolean).map(Number);

describe("the holder's start with the init as pid 1", () => {
  it("runs here: as root, on x86-64", () => {
    expect([process.getuid?.(), process.arch]).toEqual([0, "x64"]);
  });

  it("is ready once the init runs: its pid 1 is the init and holds no descriptor, the holder (bwrap) holds no socket of the start", async () => {
    const s = await start({ init });
    expect(readlinkSync(`/proc/${s.nsInit.pid}/exe`)).toBe(init);
    expect(descriptors(s.nsInit.pid)).toEqual([]);
    expect(descriptors(s.holder.pid).filter((d) => d.startsWith("socket:"))).toEqual([]);
  });

  it("an init that fails its first steps fails the start, saying the holder exited", async () => {
    await expect(start({ init: failing })).rejects.toThrow(/holder exited early/);
  });
});

describe("the holder's start without the init (bwrap's own pid 1 over `sleep`)", () => {
  it("leaves no socket of the start in the sandbox: neither its pid 1 nor the `sleep` its tenant can reach holds one", async () => {
    const s = await start({});
    const sleeps = children(s.nsInit.pid);
    expect(sleeps.length).toBe(1);
    for (const pid of [s.nsInit.pid, ...sleeps]) expect(descriptors(pid).filter((d) => d.startsWith("socket:"))).toEqual([]);
  });
});
