// What the local driver's test files share: a desired sandbox with the usual defaults, a shell
// inside it as the template's user, and the teardown that leaves no sandbox or data dir behind.
import { rmSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
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
