// What the local driver's test files share: a desired sandbox with the usual defaults, a shell
// inside it as the template's user, and the teardown that leaves no sandbox or data dir behind.
import { spawn, type ChildProcess } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { expect, vi } from "vitest";
import type { DesiredSandbox } from "../../../../controllers/drivers/driver.ts";
import type { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import type { SandboxUser } from "../../../../controllers/runtime/sandbox-view.ts";

export const USER: SandboxUser = { name: "user", uid: 1000, gid: 1000, home: "/home/user", shell: "/bin/bash" };

let seq = 0;

/** A running 1-CPU, 256 MB `base` sandbox with a fresh id starting with `prefix`. */
export function desiredSandbox(prefix: string, over: Partial<DesiredSandbox> = {}): DesiredSandbox {
  return { id: `${prefix}${process.pid}x${seq++}`, generation: 1, template: "base", state: "Running", pauseStrategy: "Freeze", resources: { cpuCount: 1, memoryMB: 256 }, allowInternetAccess: false, ...over };
}

/** `script` under bash inside the sandbox, as `user`. */
export function shIn(driver: LocalDriver, id: string, script: string, user = USER) {
  return driver.exec(id, { cmd: "/bin/bash", args: ["-c", script], cwd: user.home, env: { PATH: "/usr/bin:/bin" }, user }, { timeoutMs: 20_000 });
}

/** `fn`'s value once `ok` holds, or its last one when `ms` are up (for the caller's assertion to
 * show, or to be the point: a count that must stay below a cap). */
export async function pollUntil<T>(fn: () => Promise<T> | T, ok: (v: T) => boolean, ms = 10_000): Promise<T> {
  let v = await fn();
  for (const deadline = Date.now() + ms; !ok(v) && Date.now() < deadline; await sleep(100)) v = await fn();
  return v;
}

/** Destroys every sandbox of the driver, stops it and removes its data dir. */
export async function destroyAll(driver: LocalDriver, dataDir: string): Promise<void> {
  for (const s of await driver.list()) await driver.destroy(s.id);
  await driver.dispose();
  rmSync(dataDir, { recursive: true, force: true });
}

/** Stops `old` and lets `next` (a new driver on its data directory) converge the warm member
 * `warm` and the claimed `claimed` an older agent started, as an agent restart does: the warm one
 * reads as new when its holder was replaced, the claimed one as adopted, and a second pass says
 * nothing more. Answers what `next` logged as warnings. */
export async function adoptAfterRestart(old: LocalDriver, next: () => LocalDriver, warm: DesiredSandbox, claimed: DesiredSandbox): Promise<{ driver: LocalDriver; warnings: string[] }> {
  const createdAt = { warm: (await old.observe(warm.id))!.createdAt, claimed: (await old.observe(claimed.id))!.createdAt };
  await old.dispose();
  const driver = next();
  const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
  try {
    // The replaced warm member reads as new (not adopted: its template's start command runs again).
    expect((await driver.ensure({ ...warm, generation: 2 })).createdAt > createdAt.warm).toBe(true);
    expect((await driver.ensure({ ...claimed, generation: 2 })).createdAt).toBe(createdAt.claimed);
    // Looked at once per driver start: a second pass says nothing more.
    await driver.ensure({ ...claimed, generation: 3 });
    return { driver, warnings: warn.mock.calls.map((c) => String(c[0])) };
  } finally {
    warn.mockRestore();
  }
}

/** A host process with pid `pid` (`argv`, default a `sleep`; one that execs keeps the pid), made
 * the next pid by ns_last_pid: what a host process that takes an ended sandbox pid 1's pid looks
 * like. Other processes of the machine may take it first, so a few tries. */
export async function takePid(pid: number, argv = ["/usr/bin/sleep", "300"]): Promise<ChildProcess | undefined> {
  for (let attempt = 0; attempt < 50; attempt++) {
    writeFileSync("/proc/sys/kernel/ns_last_pid", String(pid - 1));
    const child = spawn(argv[0]!, argv.slice(1), { stdio: "ignore" });
    if (child.pid === pid) return child;
    child.kill("SIGKILL");
  }
  return undefined;
}
