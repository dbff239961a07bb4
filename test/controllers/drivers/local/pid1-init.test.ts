// A sandbox's pid 1 at `bwrap` levels is the host's init (sandbox-init.ts, README.md "The
// sandbox's pid 1"), as on a machine of its own: root inside cannot end it. `pkill sleep` ends the
// sleeps only, `kill -9 -1` every process but pid 1, and ptrace of pid 1 is refused; the sandbox is
// not restarted (its memory state, a file in /dev/shm, stays). Orphans are reaped at once, and no
// process of the sandbox holds a user namespace's descriptor. A holder an older agent started
// (bwrap's own pid 1 over `sleep infinity`) lacks the init: a warm member's restarts at once, a
// claimed one is warned about, works, and once it ends restarts with the init.
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, describe, expect, it } from "vitest";
import type { DesiredSandbox } from "../../../../controllers/drivers/driver.ts";
import type { SandboxUser } from "../../../../controllers/runtime/sandbox-view.ts";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { layoutFor } from "../../../../controllers/drivers/local/layout.ts";
import { readRecord } from "../../../../controllers/drivers/local/records.ts";
import { adoptAfterRestart, desiredSandbox, destroyAll, pollUntil, shIn } from "./fixture.ts";

const ROOT: SandboxUser = { name: "root", uid: 0, gid: 0, home: "/root", shell: "/bin/bash" };
const dataDir = mkdtempSync(join(tmpdir(), "local-pid1-init-"));
const cgroupName = `kruise-test-${process.pid}-init`;
const HOUR = 3_600_000;
const driver = new LocalDriver({ dataDir, cgroupName, pid1CheckMs: HOUR });
const told: string[] = [];
driver.onChange((id) => told.push(id));
afterAll(() => destroyAll(driver, dataDir));

const nsInitOf = (dir: string, id: string) => readRecord(layoutFor(dir, id).record)!.nsInit!;
/** Processes inside whose command line holds `what` (the pattern's brackets keep grep's own out). */
const count = (what: string) => `cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c '${what}' || true`;

const SLEEP = "setsid nohup sleep 4242 >/dev/null 2>&1 </dev/null &";
const TAIL = "setsid nohup tail -f /dev/null >/dev/null 2>&1 </dev/null &";

/** PTRACE_ATTACH of pid 1 (which would stop it), as root inside: the call's result and errno. */
const ATTACH_PID1 = `python3 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); l.ptrace.argtypes = [ctypes.c_long] * 2 + [ctypes.c_void_p] * 2; print("attach", l.ptrace(16, 1, None, None), "errno", ctypes.get_errno())'`;

/** A file in /dev/shm (a tmpfs of the sandbox's mount namespace: a restart loses it) and the
 * processes `started` before `act`, which root inside then runs; afterwards the sandbox has the
 * same pid 1, nobody was told of an end, and the file is there. Returns the processes left. */
async function survives(d: DesiredSandbox, started: string, act: string): Promise<{ sleeps: string; tails: string }> {
  await driver.ensure(d);
  await shIn(driver, d.id, "echo kept > /dev/shm/state");
  await shIn(driver, d.id, started);
  const running = `${started.includes("sleep") ? 1 : 0}\n${started.includes("tail") ? 1 : 0}\n`;
  expect(await pollUntil(() => shIn(driver, d.id, `${count("sleep 424[2]")}; ${count("tail -[f]")}`).then((r) => r.stdout), (out) => out === running)).toBe(running);
  const before = nsInitOf(dataDir, d.id);
  told.length = 0;
  await shIn(driver, d.id, act, ROOT).catch(() => undefined);
  // An end is heard within milliseconds (the spawner is the holder's parent): a second is ample.
  await sleep(1000);
  expect(told).not.toContain(d.id);
  expect(nsInitOf(dataDir, d.id)).toEqual(before);
  expect((await driver.observe(d.id))?.phase).toBe("Running");
  expect((await shIn(driver, d.id, "cat /dev/shm/state")).stdout).toBe("kept\n");
  const [sleeps, tails] = (await shIn(driver, d.id, `${count("sleep 424[2]")}; ${count("tail -[f]")}`)).stdout.split("\n");
  return { sleeps: sleeps!, tails: tails! };
}

/** The host pids of every process in the sandbox's pid namespace (its pid 1's). */
function sandboxProcesses(id: string): number[] {
  const ns = readlinkSync(`/proc/${nsInitOf(dataDir, id).pid}/ns/pid`);
  return readdirSync("/proc").filter((n) => /^\d+$/.test(n)).map(Number).filter((pid) => {
    try {
      return readlinkSync(`/proc/${pid}/ns/pid`) === ns;
    } catch {
      return false;
    }
  });
}

describe("the sandbox's pid 1: an init root inside cannot end", () => {
  it("the driver starts sandboxes with namespaces and the init here", () => {
    expect(driver.capabilities.level).not.toBe("process");
    expect(process.arch).toBe("x64");
  });

  // The sleep started before is the sandbox's only process besides its pid 1 (bwrap's own init
  // exited once it had none left).
  it("`pkill sleep` as root ends the sleeps only: the sandbox runs on, its /dev/shm kept", async () => {
    expect(await survives(desiredSandbox("ik"), SLEEP, "pkill sleep")).toEqual({ sleeps: "0", tails: "0" });
  });

  it("`kill -9 -1` as root ends every process but pid 1: the sandbox runs on, its /dev/shm kept", async () => {
    expect(await survives(desiredSandbox("ia"), `${SLEEP} ${TAIL}`, "kill -9 -1")).toEqual({ sleeps: "0", tails: "0" });
  });

  it("root inside may not ptrace pid 1 (nor read its environment): refused, and it runs on", async () => {
    const d = desiredSandbox("ip");
    await driver.ensure(d);
    const before = nsInitOf(dataDir, d.id);
    const r = await shIn(driver, d.id, `${ATTACH_PID1}; cat /proc/1/environ >/dev/null 2>&1 || echo environ refused`, ROOT);
    expect(r.stdout).toBe("attach -1 errno 1\nenviron refused\n"); // EPERM
    await sleep(500);
    expect(nsInitOf(dataDir, d.id)).toEqual(before);
    expect((await shIn(driver, d.id, "echo alive")).stdout).toBe("alive\n");
  });

  it("an orphan (a daemon whose parent exited) that ends leaves no zombie", async () => {
    const d = desiredSandbox("io");
    await driver.ensure(d);
    const pid = (await shIn(driver, d.id, "sh -c 'sleep 1000 >/dev/null 2>&1 </dev/null & echo $!'")).stdout.trim();
    // Re-parented to pid 1 once its parent has exited.
    expect(await pollUntil(() => shIn(driver, d.id, `cut -d' ' -f4 /proc/${pid}/stat`).then((r) => r.stdout), (out) => out === "1\n")).toBe("1\n");
    await shIn(driver, d.id, `kill -9 ${pid}`);
    // Gone altogether, not a zombie (state Z) holding its pid against pids.max.
    const left = await pollUntil(() => shIn(driver, d.id, `cat /proc/${pid}/stat 2>/dev/null | cut -d' ' -f3`).then((r) => r.stdout), (out) => out === "", 3000);
    expect(left).toBe("");
  });

  it("no process of the sandbox holds a user namespace's descriptor; pid 1 runs the init, under the filter", async () => {
    const d = desiredSandbox("iu");
    await driver.ensure(d);
    await shIn(driver, d.id, "setsid nohup sleep 4243 >/dev/null 2>&1 </dev/null &");
    const pids = sandboxProcesses(d.id);
    expect(pids.length).toBeGreaterThan(1);
    const held = pids.flatMap((pid) => readdirSync(`/proc/${pid}/fd`).map((fd) => {
      try {
        return `${pid}: ${readlinkSync(`/proc/${pid}/fd/${fd}`)}`;
      } catch {
        return "";
      }
    })).filter((link) => link.includes("user:["));
    expect(held).toEqual([]);
    const init = nsInitOf(dataDir, d.id);
    const exe = statSync(`/proc/${init.pid}/exe`);
    const file = statSync(join(dataDir, "sandbox-init"));
    expect([exe.dev, exe.ino]).toEqual([file.dev, file.ino]);
    expect(/^Seccomp:\s*(\d+)$/m.exec(readFileSync(`/proc/${init.pid}/status`, "utf8"))?.[1]).toBe("2");
    expect((await shIn(driver, d.id, "cat /proc/1/comm")).stdout).toBe("init\n");
  });

  it("holders an older agent started (bwrap's pid 1 over `sleep`): a warm member restarts with the init; a claimed one is warned about, works, and restarts with the init once it ends; an agent restart keeps the init file", async () => {
    const adoptDir = mkdtempSync(join(tmpdir(), "local-pid1-init-adopt-"));
    const opts = { dataDir: adoptDir, cgroupName: `${cgroupName}a` };
    const first = new LocalDriver({ ...opts, pid1CheckMs: HOUR, init: false });
    const warm = desiredSandbox("iwarm", { claimed: false });
    const d = desiredSandbox("iold", { claimed: true });
    await first.ensure(warm);
    await first.ensure(d);
    const old = nsInitOf(adoptDir, d.id);
    const oldWarm = nsInitOf(adoptDir, warm.id);
    expect(readlinkSync(`/proc/${old.pid}/exe`)).toBe("/usr/bin/bwrap");
    const { driver: adopting, warnings } = await adoptAfterRestart(first, () => new LocalDriver({ ...opts, pid1CheckMs: 200 }), warm, d);
    const file = statSync(join(adoptDir, "sandbox-init"));
    const runsInit = (pid: number) => {
      const exe = statSync(`/proc/${pid}/exe`);
      return [exe.dev, exe.ino];
    };
    let next = adopting;
    try {
      // The warm member is nobody's yet: a new holder, the init its pid 1.
      const newWarm = nsInitOf(adoptDir, warm.id);
      expect(newWarm.pid).not.toBe(oldWarm.pid);
      expect(runsInit(newWarm.pid)).toEqual([file.dev, file.ino]);
      expect(warnings.filter((w) => w.includes(warm.id))).toEqual([expect.stringContaining("is bwrap's own over `sleep`, not the init (root inside can end it) (started by an older agent): an unclaimed warm member, restarted with it")]);
      expect(warnings.filter((w) => w.includes(d.id))).toEqual([expect.stringContaining("not the init (root inside can end it) (started by an older agent): claimed, left running until its holder restarts (a Stop pause); 1 such sandbox(es)")]);
      // The claimed one runs on as it was.
      expect(nsInitOf(adoptDir, d.id)).toEqual(old);
      expect((await shIn(next, d.id, "echo adopted")).stdout).toBe("adopted\n");
      // Its pid 1 still ends with its `sleep`: the timer notices, and a pass restarts it.
      await shIn(next, d.id, "kill -9 $(cat /proc/1/task/1/children)", ROOT).catch(() => undefined);
      const back = await pollUntil(async () => (await next.ensure({ ...d, generation: 4 }), nsInitOf(adoptDir, d.id)), (now) => now !== undefined && now.pid !== old.pid, 20_000);
      expect(back.pid).not.toBe(old.pid);
      expect(runsInit(back.pid)).toEqual([file.dev, file.ino]);
      expect((await shIn(next, d.id, "echo alive")).stdout).toBe("alive\n");
      // The next agent start leaves the init file as it is: replaced, each running init would read
      // as a "(deleted)" executable.
      await next.dispose();
      next = new LocalDriver({ ...opts, pid1CheckMs: HOUR });
      expect(statSync(join(adoptDir, "sandbox-init")).ino).toBe(file.ino);
      expect(readlinkSync(`/proc/${back.pid}/exe`)).toBe(join(adoptDir, "sandbox-init"));
      expect((await shIn(next, d.id, "echo again")).stdout).toBe("again\n");
    } finally {
      await destroyAll(next, adoptDir);
    }
  });
});
