// A command enters its sandbox through the sandbox's pid 1 (enter.pl joins that process's
// namespaces and root, as root on the host). Root inside a sandbox can end its own pid 1 (ptrace
// attach, then resume it with SIGKILL), and nothing tells the driver or the runtime, whose view of
// the sandbox is taken once. Once a host process gets that pid, a command that went by the pid
// alone would run as root in the host's namespaces with the host's `/`. Here pid 1 is killed from
// the host (the same end, without the ptrace), a host process takes its pid, and commands through
// the view taken before must not run anywhere, nor may the files API walk that process's `/`,
// and that host process must not be touched.
import { spawn } from "node:child_process";
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, readlinkSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { afterAll, describe, expect, it } from "vitest";
import { procStart } from "../../../../controllers/drivers/local/holder.ts";
import type { IsolationLevel } from "../../../../controllers/drivers/driver.ts";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { LocalSandboxView } from "../../../../controllers/drivers/local/local-view.ts";
import { PID_FILE_ENV } from "../../../../controllers/drivers/local/spawner-sandbox-pid.ts";
import type { HostCommand, SandboxUser, SpawnRequest } from "../../../../controllers/runtime/sandbox-view.ts";
import { desiredSandbox, destroyAll, pollUntil, takePid } from "./fixture.ts";

const ROOT: SandboxUser = { name: "root", uid: 0, gid: 0, home: "/root", shell: "/bin/bash" };

/** What would show the host: its hostname, its /work (or /etc/hostname's text), the uid. */
const PROBE: SpawnRequest = { cmd: "/bin/sh", args: ["-c", "echo ran; hostname; id -u; ls /work 2>/dev/null | head -3"], cwd: "/", env: { PATH: "/usr/bin:/bin" }, user: ROOT };

const text = (s: Readable) =>
  new Promise<string>((resolve) => {
    let t = "";
    s.on("data", (c) => (t += String(c)));
    s.on("error", () => {});
    s.once("close", () => resolve(t));
  });

/** `host` through the view's launcher, as the runtime starts a command, but with no pid report
 * asked for, so that a wrapper that refuses still shows its exit code and stderr. */
async function run(view: LocalSandboxView, host: HostCommand): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const { [PID_FILE_ENV]: _wanted, ...env } = host.env;
  const p = await view.launcher!.spawnPipes({ ...host, env }, false);
  const [stdout, stderr] = [text(p.stdout), text(p.stderr)];
  const exit = await new Promise<{ code: number | null }>((resolve) => p.onExit(resolve));
  return { code: exit.code, stdout: await stdout, stderr: await stderr };
}

// What enter.pl's safety rests on: a handle on /proc/<pid> stays bound to the process it was
// opened for, while the path /proc/<pid> names whatever process has the pid now.
describe("a /proc/<pid> handle", () => {
  it("reaches nothing once its process is gone, while the same pid by name is the process that took it", async () => {
    const ended = spawn("/usr/bin/sleep", ["300"], { stdio: "ignore" });
    const pid = ended.pid!;
    const fd = openSync(`/proc/${pid}`, "r");
    try {
      expect(readlinkSync(`/proc/self/fd/${fd}/ns/mnt`)).toBe(readlinkSync(`/proc/${pid}/ns/mnt`));
      ended.kill("SIGKILL");
      await new Promise((r) => ended.once("exit", r)); // reaped by then
      const squatter = await takePid(pid);
      expect(squatter?.pid).toBe(pid);
      try {
        expect(readlinkSync(`/proc/${pid}/ns/mnt`)).toMatch(/^mnt:/);
        expect(() => readlinkSync(`/proc/self/fd/${fd}/ns/mnt`)).toThrow();
        expect(() => readlinkSync(`/proc/self/fd/${fd}/root`)).toThrow();
      } finally {
        squatter?.kill("SIGKILL");
      }
    } finally {
      closeSync(fd);
    }
  });

  it("the process that takes a pid (fixture.ts takePid) gets it without moving the host's pid counter, which every fork of the machine draws from", async () => {
    const counter = () => Number(readFileSync("/proc/sys/kernel/ns_last_pid", "latin1"));
    const max = Number(readFileSync("/proc/sys/kernel/pid_max", "latin1"));
    const before = counter();
    // A free pid half the pid space away from where forks are now.
    let pid = ((before + Math.floor(max / 2)) % (max - 400)) + 300;
    while (existsSync(`/proc/${pid}`)) pid++;
    const squatter = await takePid(pid);
    try {
      expect(squatter?.pid).toBe(pid);
      expect(readFileSync(`/proc/${pid}/comm`, "latin1")).toBe("sleep\n");
      // Other processes fork meanwhile (a few, not a quarter of the pid space). The distance is
      // taken around the pid space, as the counter wraps past pid_max.
      const moved = Math.abs(counter() - before);
      expect(Math.min(moved, max - moved)).toBeLessThan(max / 4);
    } finally {
      squatter?.kill("SIGKILL");
    }
    await pollUntil(() => squatter?.signalCode, (s) => s === "SIGKILL");
    expect(squatter?.signalCode).toBe("SIGKILL");
  });
});

// The best level this host offers (bwrap+cgroup here) and `bwrap` (no cgroups); `process` level
// enters nothing.
for (const level of [undefined, "bwrap"] as (IsolationLevel | undefined)[]) {
  const dataDir = mkdtempSync(join(tmpdir(), "local-enter-reuse-"));
  const driver = new LocalDriver({ dataDir, level, cgroupName: `kruise-test-${process.pid}-enter-reuse-${level ?? "best"}` });
  afterAll(async () => {
    await destroyAll(driver, dataDir);
  });

  // No skip: a host where the driver falls back to `process` (no bwrap, not root) fails here,
  // rather than passing without having entered anything.
  describe(`a command and a reused pid 1 (${driver.capabilities.level})`, () => {
    it("the driver enters namespaces at this level", () => {
      expect(driver.capabilities.level).not.toBe("process");
    });

    it("enter.pl refuses a holder whose start time is not the recorded one, and enters the recorded one", async () => {
      const d = desiredSandbox("er");
      await driver.ensure(d);
      const view = driver.view(d.id) as LocalSandboxView;
      const host = view.command(PROBE);
      const ok = await run(view, host);
      expect(ok.code).toBe(0);
      expect(ok.stdout.split("\n")[0]).toBe("ran");
      expect(ok.stdout).not.toContain(`\n${hostname()}\n`);
      // The same pid with another start time: what a process that took the pid looks like.
      const target = host.args[2]!;
      expect(target).toMatch(/^\d+:\d+$/);
      const [pid, start] = target.split(":");
      const other = { ...host, args: host.args.map((a, i) => (i === 2 ? `${pid}:${BigInt(start!) + 1n}` : a)) };
      const refused = await run(view, other);
      expect(refused).toMatchObject({ code: 127, stdout: "" });
      expect(refused.stderr).toMatch(/^enter\.pl: the sandbox is not running/);
      await driver.destroy(d.id);
    });

    it("once pid 1 is gone and a host process has its pid, no command runs, no file of its root is reached, and that process is untouched", async () => {
      const d = desiredSandbox("er");
      const obs = await driver.ensure(d);
      const [pid, start] = obs.incarnation!.split(":");
      const nsPid = Number(pid);
      expect(procStart(nsPid)).toBe(start);
      // The view the runtime holds from registration on, and a command it built just before the end
      // (one whose view check passed a moment before pid 1 ended).
      const view = driver.view(d.id) as LocalSandboxView;
      const built = view.command(PROBE);

      process.kill(nsPid, "SIGKILL");
      await pollUntil(() => existsSync(`/proc/${nsPid}`), (there) => !there);
      expect(existsSync(`/proc/${nsPid}`)).toBe(false);
      const squatter = await takePid(nsPid);
      expect(squatter?.pid).toBe(nsPid);
      const squatterStart = procStart(nsPid);
      try {
        // A command now: the sandbox is not running, as for a stopped one.
        expect(() => view.command(PROBE)).toThrow(/not running/);
        // The one built before: enter.pl itself refuses the process that has the pid now.
        const r = await run(view, built);
        expect(r.stdout).toBe("");
        expect(r.code).toBe(127);
        expect(r.stderr).toMatch(/^enter\.pl: the sandbox is not running/);
        // Through the launcher as the runtime starts it (with its pid report): a start error.
        await expect(view.launcher!.spawnPipes(built, false)).rejects.toThrow(/could not enter the sandbox/);
        // The files API walks from `/proc/<pid 1>/root`: a view whose check passed just before the
        // end (its target still names the old pid 1) must not pin the new process's `/`.
        const late = new LocalSandboxView({ id: d.id, mounts: [], namespaces: true, launcher: view.launcher, target: () => ({ nsInit: { pid: nsPid, start: start! }, cgroupProcs: [] }) });
        expect(() => late.pin("/work")).toThrow(/not running/);
        // Before anything under that `/` is looked at: a directory no host has, walked there, would
        // answer ENOENT, and one the host has would not (whether a host path exists).
        expect(() => late.pin(`/no-such-dir-${process.pid}/x`)).toThrow(/not running/);
        expect(() => late.pin(`/no-such-dir-${process.pid}/x`, { create: true })).toThrow(/not running/);
        expect(procStart(nsPid)).toBe(squatterStart);
        expect(squatter!.exitCode).toBeNull();
        expect(squatter!.signalCode).toBeNull();
      } finally {
        squatter?.kill("SIGKILL");
        await driver.destroy(d.id);
      }
    });
  });
}
