// A tmpfs a start left at <dir>/volatile when the agent died between userns.pl's mount and the
// holder (two stacked, to be harsh): the next agent's start leaves exactly one, fresh, and a
// destroy of a stopped sandbox with one left there leaves no mount under its directory. Adopted
// from the s35-shm review's repro (rv-volatile-crash).
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { layoutFor } from "../../../../controllers/drivers/local/layout.ts";
import { desiredSandbox, destroyAll, shIn } from "./fixture.ts";

const dataDir = mkdtempSync(join(tmpdir(), "local-volleft-"));
const cgroupName = `kruise-test-${process.pid}-volleft`;
let driver = new LocalDriver({ dataDir, cgroupName });
/** The host's mount points at or below `dir`. */
const mountsAt = (dir: string) =>
  readFileSync("/proc/self/mountinfo", "utf8")
    .split("\n")
    .map((l) => l.split(" ")[4])
    .filter((at) => at === dir || at?.startsWith(`${dir}/`));
const leaveTmpfs = (at: string) => execFileSync("mount", ["-t", "tmpfs", "-o", "nosuid,nodev", "tmpfs", at]);

afterAll(() => destroyAll(driver, dataDir));

it("a /dev/shm and /run tmpfs a killed start left: the next agent's start keeps one, fresh; destroy keeps none", { timeout: 90_000 }, async () => {
  const d = desiredSandbox("volleft");
  await driver.ensure(d);
  const layout = layoutFor(dataDir, d.id, true, true);
  await driver.ensure({ ...d, generation: 2, state: "Paused", pauseStrategy: "Stop" });
  leaveTmpfs(layout.volatile);
  leaveTmpfs(layout.volatile);
  // What the sandbox had in /dev/shm then: a new start must not show it.
  execFileSync("sh", ["-c", 'mkdir "$1/shm" && touch "$1/shm/stale"', "sh", layout.volatile]);
  expect(mountsAt(layout.volatile)).toHaveLength(2);

  await driver.dispose();
  driver = new LocalDriver({ dataDir, cgroupName });
  await driver.ensure({ ...d, generation: 3, state: "Running" });
  expect(mountsAt(layout.volatile)).toHaveLength(1);
  expect((await shIn(driver, d.id, "echo ok > /dev/shm/x && cat /dev/shm/x; ls /dev/shm")).stdout).toBe("ok\nx\n");

  await driver.ensure({ ...d, generation: 4, state: "Paused", pauseStrategy: "Stop" });
  leaveTmpfs(layout.volatile);
  await driver.destroy(d.id);
  expect(mountsAt(layout.dir)).toEqual([]);
});
