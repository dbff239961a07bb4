// A sandbox whose pid 1 ends by itself (the host kills it, the OOM killer takes it; root inside
// ends an older agent's holder, bwrap's init, by ending its `sleep` or through ptrace: the init of
// sandbox-init.ts it cannot end, pid1-init.test.ts) is rebooted, as Kubernetes restarts a dead container:
// the driver notices (its spawner hears the holder exit; a holder it did not start is looked at
// every PID1_CHECK_MS) and tells its listener (the agent), whose next pass starts it again, its
// files kept and its processes gone. Killed again soon after a restart, it waits a backoff first,
// reported not ready meanwhile. The driver here looks only once an hour (pid1CheckMs): whatever
// it notices within the polls' 10 s, it heard of, not looked for.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, readlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { DesiredSandbox, SandboxObservation } from "../../../../controllers/drivers/driver.ts";
import type { SandboxUser } from "../../../../controllers/runtime/sandbox-view.ts";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { Spawner, type SpawnedProcess } from "../../../../controllers/drivers/local/spawner.ts";
import { layoutFor } from "../../../../controllers/drivers/local/layout.ts";
import { LocalSandboxView } from "../../../../controllers/drivers/local/local-view.ts";
import { PF_EXITING, statFieldsIn } from "../../../../controllers/drivers/local/proc-handle.ts";
import { readRecord } from "../../../../controllers/drivers/local/records.ts";
import { desiredSandbox, destroyAll, pollUntil, shIn } from "./fixture.ts";
import { PTRACE_KILL_PID1 } from "../../../support/ptrace-kill-pid1.ts";

const ROOT: SandboxUser = { name: "root", uid: 0, gid: 0, home: "/root", shell: "/bin/bash" };
const dataDir = mkdtempSync(join(tmpdir(), "local-pid1-ended-"));
const cgroupName = `kruise-test-${process.pid}-pid1`;
/** Longer than any test here: a restart these tests see was not found by the timer's look. */
const HOUR = 3_600_000;
const driver = new LocalDriver({ dataDir, cgroupName, pid1CheckMs: HOUR });
const told: string[] = [];
driver.onChange((id) => told.push(id));
afterAll(() => destroyAll(driver, dataDir));
/** Holders as an older agent started them (bwrap's pid 1 over `sleep infinity`), which root
 * inside can end. */
const olderDir = mkdtempSync(join(tmpdir(), "local-pid1-older-"));
const older = new LocalDriver({ dataDir: olderDir, cgroupName: `${cgroupName}o`, pid1CheckMs: HOUR, init: false });
const olderTold: string[] = [];
older.onChange((id) => olderTold.push(id));
afterAll(() => destroyAll(older, olderDir));

/** Processes inside whose command line holds `marker` (the pattern's brackets keep grep's own out). */
const COUNT_MARKED = "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c 'sleep 424[2]'";

/** This process's descriptors of `/proc/<pid>/stat` (what the driver watches a pid 1 through);
 * with no pid, of every process's. */
function statDescriptorsOf(pid?: number): string[] {
  const fds = readdirSync("/proc/self/fd").map((fd) => {
    try {
      return readlinkSync(`/proc/self/fd/${fd}`);
    } catch {
      return ""; // the directory's own descriptor, closed by now
    }
  });
  return fds.filter((path) => (pid === undefined ? /^\/proc\/\d+\/stat$/.test(path) : path === `/proc/${pid}/stat`));
}

/** A spawner that holds back what it hears of holders' exits (pushed to `exits`, for the test to
 * deliver at a moment of its choice). */
function holdingExits(exits: Array<(heard: boolean) => void>): Spawner {
  return new (class extends Spawner {
    override async spawn(...args: Parameters<Spawner["spawn"]>): Promise<SpawnedProcess> {
      const p = await super.spawn(...args);
      return { ...p, forget: (ended) => (ended ? (p.forget(), exits.push(ended)) : p.forget()) };
    }
  })();
}

/** Ends pid 1 with `end`, then does what the agent does on hearing of it (a pass) until the
 * sandbox runs again: returns the observations the passes made. */
async function endedAndRestarted(d: DesiredSandbox, end: () => Promise<unknown>, on = driver, heard = told): Promise<SandboxObservation[]> {
  const before = await on.observe(d.id);
  expect(before?.phase).toBe("Running");
  heard.length = 0;
  await end();
  // Noticed without any call of ours: the listener hears of it.
  expect(await pollUntil(() => heard.includes(d.id), Boolean, 10_000)).toBe(true);
  // Until a pass starts it again it is not Failed (the edge keeps a Failed sandbox so for good).
  expect((await on.observe(d.id))?.phase).toBe("Pending");
  const seen: SandboxObservation[] = [];
  const last = await pollUntil(async () => {
    const obs = await on.ensure(d);
    seen.push(obs);
    return obs;
  }, (obs) => obs.phase === "Running", 25_000);
  expect(last.phase).toBe("Running");
  expect(last.incarnation).not.toBe(before?.incarnation);
  return seen;
}

/** Pid 1 of `d` (of driver `on`, data directory `dir`) killed from the host: `heard` is told,
 * passes bring it back, and a command runs. */
async function killedAndBack(on: LocalDriver, dir: string, d: DesiredSandbox, heard: string[]): Promise<void> {
  const kill = async () => process.kill(readRecord(layoutFor(dir, d.id).record)!.nsInit!.pid, "SIGKILL");
  await endedAndRestarted(d, kill, on, heard);
  expect((await shIn(on, d.id, "echo alive")).stdout).toBe("alive\n");
}

/** A file and a process before; after the restart the file is there, the process gone, and a
 * command runs. */
async function rebootsKeepingFiles(d: DesiredSandbox, end: () => Promise<unknown>, on = driver, heard = told): Promise<void> {
  await shIn(on, d.id, "echo kept > /tmp/before");
  await shIn(on, d.id, "setsid nohup sleep 4242 >/dev/null 2>&1 < /dev/null &");
  expect((await pollUntil(() => shIn(on, d.id, COUNT_MARKED).then((r) => r.stdout), (out) => out === "1\n")).trim()).toBe("1");
  await endedAndRestarted(d, end, on, heard);
  expect((await shIn(on, d.id, "cat /tmp/before")).stdout).toBe("kept\n");
  expect((await shIn(on, d.id, `${COUNT_MARKED} || true`)).stdout).toBe("0\n");
  expect((await shIn(on, d.id, "echo alive")).stdout).toBe("alive\n");
}

describe("a sandbox whose pid 1 ends by itself", () => {
  // No skip: at `process` level a command as root is the host's root and pid 1 the host's init,
  // which the ptrace and kill cases below would end.
  it("the driver enters namespaces at this level", () => {
    expect(driver.capabilities.level).not.toBe("process");
  });

  it("killed from the host: restarted promptly, files kept, processes gone", async () => {
    expect(driver.capabilities.level).not.toBe("process");
    const d = desiredSandbox("pe");
    await driver.ensure(d);
    await rebootsKeepingFiles(d, async () => process.kill(readRecord(layoutFor(dataDir, d.id).record)!.nsInit!.pid, "SIGKILL"));
  });

  it("an older agent's holder: root inside ends its sleep (pkill): the same", async () => {
    expect(older.capabilities.level).not.toBe("process");
    const d = desiredSandbox("pk");
    await older.ensure(d);
    await rebootsKeepingFiles(d, () => shIn(older, d.id, "kill -9 $(cat /proc/1/task/1/children)", ROOT).catch(() => undefined), older, olderTold);
  });

  it("an older agent's holder: killed by root inside through ptrace: the same", async () => {
    expect(older.capabilities.level).not.toBe("process");
    const d = desiredSandbox("pt");
    await older.ensure(d);
    await rebootsKeepingFiles(d, async () => {
      const r = await shIn(older, d.id, `(${PTRACE_KILL_PID1}
) 2>&1`, ROOT).catch((err: Error) => ({ stdout: "", stderr: err.message }));
      // Yama's ptrace_scope >= 1 refuses the attach (the sandbox lacks CAP_SYS_PTRACE), and the
      // script refuses a pid 1 in the host's pid namespace: either fails here, by name, not by the
      // poll's timeout (the e2e case asserts the same).
      expect(`${r.stdout}${r.stderr}`, "ptrace refused (Yama ptrace_scope?) or pid 1 the host's").not.toMatch(/PTRACE_ATTACH|refused/);
    }, older, olderTold);
  });

  it("killed again soon after its restart: started again after a backoff, not ready meanwhile", async () => {
    expect(driver.capabilities.level).not.toBe("process");
    const d = desiredSandbox("pb");
    await driver.ensure(d);
    const kill = async () => process.kill(readRecord(layoutFor(dataDir, d.id).record)!.nsInit!.pid, "SIGKILL");
    await endedAndRestarted(d, kill);
    const seen = await endedAndRestarted(d, kill);
    expect(seen[0]).toMatchObject({ phase: "Pending", message: expect.stringContaining("pid 1") });
    // The agent's next pass waits this long (not 250 ms): the first wait is a second.
    expect(seen[0]?.retryAfterMs).toBeGreaterThan(0);
    expect(seen[0]?.retryAfterMs).toBeLessThanOrEqual(1000);
    expect((await shIn(driver, d.id, "echo alive")).stdout).toBe("alive\n");
  });

  it("a driver stopped while a pass waits on a sandbox's lock: the pass opens no descriptor of its pid 1 (nothing would close it)", async () => {
    const otherDir = mkdtempSync(join(tmpdir(), "local-pid1-closed-"));
    const other = new LocalDriver({ dataDir: otherDir, cgroupName: `${cgroupName}c` });
    try {
      const d = desiredSandbox("pc");
      const pass = other.ensure(d);
      const queued = other.ensure({ ...d, generation: 2 });
      other.closeHelpers();
      await Promise.all([pass, queued]);
      const pid = readRecord(layoutFor(otherDir, d.id).record)!.nsInit!.pid;
      expect(statDescriptorsOf(pid)).toEqual([]);
      // The same driver's watch before it stops holds one (what the assertion above would see).
      const d2 = desiredSandbox("pc");
      await driver.ensure(d2);
      expect(statDescriptorsOf(readRecord(layoutFor(dataDir, d2.id).record)!.nsInit!.pid)).toHaveLength(1);
      await driver.destroy(d2.id);
    } finally {
      await destroyAll(other, otherDir);
    }
  });

  it("a files pin while its pid 1 is exiting (PF_EXITING, not yet a zombie) answers 'not running', as after it ended, not ENOENT", async () => {
    expect(driver.capabilities.level).not.toBe("process");
    const d = desiredSandbox("px");
    await driver.ensure(d);
    const { pid, start } = readRecord(layoutFor(dataDir, d.id).record)!.nsInit!;
    const view = driver.view(d.id);
    // A path of the kernel's (VIRTUAL_DIRS): reached through pid 1's root, whatever the layout.
    view.pin!("/dev").close();
    // A view whose check of pid 1 passed just before it began to exit (the driver's view checks
    // on every call, so only the handle's own check stands between a pin and that process then).
    const late = new LocalSandboxView({ id: d.id, mounts: [], namespaces: true, target: () => ({ nsInit: { pid, start }, cgroupProcs: [] }) });
    late.pin("/dev").close();
    // A process of its pid namespace whose parent is outside it and does not reap it (stopped): an
    // ending pid 1 then waits in its namespace's teardown, exiting, state S, as a sandbox's does
    // while a command's host side (enter.pl) has yet to reap its child.
    const holder = spawn("/usr/bin/nsenter", ["--target", String(pid), "--pid", "--", "/usr/bin/sleep", "1000"], { stdio: "ignore" });
    try {
      const inside = await pollUntil(() => readFileSync(`/proc/${holder.pid}/task/${holder.pid}/children`, "latin1").trim(), Boolean);
      expect(inside).toMatch(/^\d+$/);
      process.kill(holder.pid!, "SIGSTOP");
      process.kill(pid, "SIGKILL");
      const f = await pollUntil(() => statFieldsIn(readFileSync(`/proc/${pid}/stat`, "latin1"))!, (f) => (Number(f[6]) & PF_EXITING) !== 0);
      expect(f[0]).not.toBe("Z");
      expect(Number(f[6]) & PF_EXITING).toBe(PF_EXITING);
      expect(() => view.pin!("/dev")).toThrow(/not running/);
      expect(() => late.pin("/dev")).toThrow(/not running/);
      expect(() => late.pin("/tmp/x", { create: true })).toThrow(/not running/);
    } finally {
      holder.kill("SIGKILL");
      holder.kill("SIGCONT");
    }
  });

  it("ended by the driver itself (a Stop pause, a destroy): not reported", async () => {
    const d = desiredSandbox("ps");
    await driver.ensure(d);
    await driver.ensure({ ...d, generation: 2, state: "Paused", pauseStrategy: "Stop" });
    const other = desiredSandbox("pd");
    await driver.ensure(other);
    await driver.destroy(other.id);
    told.length = 0;
    await new Promise((r) => setTimeout(r, 2000)); // their holders' exits heard (the first in ms)
    expect(told.filter((id) => id === d.id || id === other.id)).toEqual([]);
  });

  it("adopted from an earlier agent: the timer looks at it, and it is restarted", async () => {
    const adoptDir = mkdtempSync(join(tmpdir(), "local-pid1-adopt-"));
    const opts = { dataDir: adoptDir, cgroupName: `${cgroupName}a` };
    const first = new LocalDriver({ ...opts, pid1CheckMs: HOUR });
    const d = desiredSandbox("pa");
    const paused = desiredSandbox("pp");
    const gone = desiredSandbox("pg");
    for (const s of [d, paused, gone]) await first.ensure(s);
    // The first agent goes (its spawner with it); its sandbox runs on.
    await first.dispose();
    const next = new LocalDriver({ ...opts, pid1CheckMs: 200 });
    const heard: string[] = [];
    next.onChange((id) => heard.push(id));
    try {
      expect((await next.ensure(d)).phase).toBe("Running");
      expect((await shIn(next, d.id, "echo adopted")).stdout).toBe("adopted\n");
      await killedAndBack(next, adoptDir, d, heard);
      // Timed too (adopted), then ended by the driver itself: a Stop pause and a destroy. Each
      // drops its watch as it ends the holder (the descriptor closed when the call returns, before
      // any look of the timer's could have), and the timer's looks (several in 1.5 s) report neither.
      for (const s of [paused, gone]) expect((await next.ensure(s)).phase).toBe("Running");
      const [pausedPid, gonePid] = [paused, gone].map((s) => readRecord(layoutFor(adoptDir, s.id).record)!.nsInit!.pid);
      expect(statDescriptorsOf(pausedPid)).toHaveLength(1);
      expect(statDescriptorsOf(gonePid)).toHaveLength(1);
      heard.length = 0;
      await next.ensure({ ...paused, generation: 2, state: "Paused", pauseStrategy: "Stop" });
      expect(statDescriptorsOf(pausedPid)).toEqual([]);
      await next.destroy(gone.id);
      expect(statDescriptorsOf(gonePid)).toEqual([]);
      await new Promise((r) => setTimeout(r, 1500));
      expect(heard).toEqual([]);
    } finally {
      await destroyAll(next, adoptDir);
    }
  });

  it("its holder's spawner died: the timer looks at it from then on, and it is restarted", async () => {
    const ownDir = mkdtempSync(join(tmpdir(), "local-pid1-spawner-"));
    const spawner = new Spawner();
    const own = new LocalDriver({ dataDir: ownDir, cgroupName: `${cgroupName}s`, spawner, pid1CheckMs: 200 });
    const heard: string[] = [];
    own.onChange((id) => heard.push(id));
    try {
      const d = desiredSandbox("pw");
      await own.ensure(d);
      const first = spawner.pid!;
      process.kill(first, "SIGKILL");
      await pollUntil(() => spawner.pid, (pid) => pid === undefined);
      // Nobody will hear its holder exit now (the next spawner is not its parent).
      await killedAndBack(own, ownDir, d, heard);
    } finally {
      await destroyAll(own, ownDir);
    }
  });

  it("a holder's exit heard as the driver stops: the check it queued tells nobody, and no descriptor is left open", async () => {
    const ownDir = mkdtempSync(join(tmpdir(), "local-pid1-stopping-"));
    const exits: Array<(heard: boolean) => void> = [];
    const own = new LocalDriver({ dataDir: ownDir, cgroupName: `${cgroupName}h`, spawner: holdingExits(exits), pid1CheckMs: HOUR });
    const heard: string[] = [];
    own.onChange((id) => heard.push(id));
    try {
      const d = desiredSandbox("ph");
      await own.ensure(d);
      expect(exits).toHaveLength(1);
      const { pid } = readRecord(layoutFor(ownDir, d.id).record)!.nsInit!;
      expect(statDescriptorsOf(pid)).toHaveLength(1);
      // Every watch descriptor of this process (the shared driver's too, idle meanwhile).
      const before = statDescriptorsOf().length;
      process.kill(pid, "SIGKILL");
      await pollUntil(() => existsSync(`/proc/${pid}`), (there) => !there);
      // The exit, then at once the stop: the check waits on the sandbox's lock (a microtask).
      exits[0]!(true);
      own.closeHelpers();
      await new Promise((r) => setTimeout(r, 500));
      expect(heard).toEqual([]);
      // Its one closed, none opened since (by the queued check, or any pass it would start).
      expect(statDescriptorsOf().length).toBe(before - 1);
    } finally {
      await destroyAll(own, ownDir);
    }
  });

  it("frozen (a Freeze pause), its pid 1 killed from the host: noticed while frozen, not at the thaw", async () => {
    const ownDir = mkdtempSync(join(tmpdir(), "local-pid1-frozen-"));
    const own = new LocalDriver({ dataDir: ownDir, cgroupName: `${cgroupName}f`, pid1CheckMs: 200 });
    const heard: string[] = [];
    own.onChange((id) => heard.push(id));
    try {
      const d = desiredSandbox("pf");
      await own.ensure(d);
      expect((await own.ensure({ ...d, generation: 2, state: "Paused", pauseStrategy: "Freeze" })).phase).toBe("Paused");
      process.kill(readRecord(layoutFor(ownDir, d.id).record)!.nsInit!.pid, "SIGKILL");
      expect(await pollUntil(() => heard.includes(d.id), Boolean, 10_000)).toBe(true);
    } finally {
      await destroyAll(own, ownDir);
    }
  });
});
