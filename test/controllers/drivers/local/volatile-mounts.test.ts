// A sandbox with a user namespace gets its /dev/shm and /run from one tmpfs of the host's user
// namespace (layout.ts volatileBinds, userns.pl `volatile`), so the files API (the host's root)
// can create there. What must hold of that mount: inert from the host's side (nosuid, nodev,
// passable by the sandbox's range only), no host path in the sandbox's mountinfo, the modes and
// owners bwrap's own tmpfs had, fresh at each holder start (a Stop pause is a reboot), and gone
// with a Stop pause and with destroy.
import { mkdtempSync, readFileSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { isMounted } from "../../../../controllers/drivers/local/disk.ts";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { layoutFor } from "../../../../controllers/drivers/local/layout.ts";
import { desiredSandbox, destroyAll, shIn } from "./fixture.ts";

const dataDir = mkdtempSync(join(tmpdir(), "local-volatile-"));
const driver = new LocalDriver({ dataDir, cgroupName: `kruise-test-${process.pid}-volatile` });
const ROOT = { name: "root", uid: 0, gid: 0, home: "/root", shell: "/bin/bash" };
const sh = (id: string, script: string, user?: typeof ROOT) => shIn(driver, id, script, user);

/** The host's mount table entries at or below `dir`: mount point, options, file system type. */
const mountsAt = (dir: string) =>
  readFileSync("/proc/self/mountinfo", "utf8")
    .split("\n")
    .filter(Boolean)
    .map((l) => ({ at: l.split(" ")[4]!, options: l.split(" ")[5]!, type: l.split(" - ")[1]?.split(" ")[0] }))
    .filter((m) => m.at === dir || m.at.startsWith(`${dir}/`));

/** The super block options (`size=`, `nr_inodes=`) of the mount at `dir`. */
const superOptions = (dir: string) =>
  readFileSync("/proc/self/mountinfo", "utf8")
    .split("\n")
    .filter((l) => l.split(" ")[4] === dir)
    .flatMap((l) => l.split(" - ")[1]!.split(" ")[2]!.split(","));

afterAll(() => destroyAll(driver, dataDir));

describe("/dev/shm and /run of a sandbox with a user namespace", { timeout: 90_000 }, () => {
  it("one tmpfs on the host, nosuid and nodev, root's 0710 to the range; inside, bwrap's modes and no host path", async () => {
    const d = desiredSandbox("vol");
    await driver.ensure(d);
    const layout = layoutFor(dataDir, d.id, true, true);
    const [m] = mountsAt(layout.volatile);
    expect(m).toMatchObject({ at: layout.volatile, type: "tmpfs" });
    expect(m!.options.split(",")).toEqual(expect.arrayContaining(["nosuid", "nodev"]));
    // Bounded by the sandbox's memory (half, userns.ts volatileBounds), not tmpfs's default of
    // half the host's: the files API's writes there are charged to no sandbox's memory cgroup.
    const half = d.resources.memoryMB / 2;
    expect(superOptions(layout.volatile)).toEqual(expect.arrayContaining([`size=${half * 1024}k`, `nr_inodes=${half * 64}`]));
    const top = statSync(layout.volatile);
    expect([top.mode & 0o7777, top.uid]).toEqual([0o710, 0]);
    // The group is the range's first gid: the sandbox's root as the host sees it, never host root.
    expect(top.gid).toBeGreaterThan(0);
    const shm = statSync(join(layout.volatile, "shm"));
    expect([shm.mode & 0o7777, shm.uid, shm.gid]).toEqual([0o1777, top.gid, top.gid]);
    expect(statSync(join(layout.volatile, "run")).mode & 0o7777).toBe(0o755);

    const inside = await sh(d.id, "stat -c '%a %U %G' /dev/shm /run; grep -E ' /(dev/shm|run) ' /proc/self/mountinfo", ROOT);
    expect(inside.stdout).toMatch(/^1777 root root\n755 root root\n/);
    expect(inside.stdout).not.toContain(dataDir);
    // A command of `user` uses /dev/shm (multiprocessing, Chromium), not /run.
    const user = await sh(d.id, "echo a > /dev/shm/u && cat /dev/shm/u; echo b > /run/u 2>/dev/null || echo denied");
    expect(user.stdout).toBe("a\ndenied\n");
    await driver.destroy(d.id);
  });

  it("a Stop pause unmounts it and the start after mounts a fresh one; destroy leaves no mount and no directory", async () => {
    const d = desiredSandbox("volstop");
    await driver.ensure(d);
    const layout = layoutFor(dataDir, d.id, true, true);
    await sh(d.id, "echo x > /dev/shm/kept && echo y > /run/kept", ROOT);
    await driver.ensure({ ...d, generation: 2, state: "Paused", pauseStrategy: "Stop" });
    expect(isMounted(layout.volatile)).toBe(false);
    await driver.ensure({ ...d, generation: 3, state: "Running" });
    expect(isMounted(layout.volatile)).toBe(true);
    const after = await sh(d.id, "ls -A /dev/shm; test -e /run/kept || echo gone; echo z > /dev/shm/new && cat /dev/shm/new", ROOT);
    expect(after.stdout).toBe("gone\nz\n");
    // Only one tmpfs there: the old one went, not stacked under the new.
    expect(mountsAt(layout.volatile)).toHaveLength(1);
    await driver.destroy(d.id);
    expect(mountsAt(layout.dir)).toEqual([]);
    expect(() => statSync(layout.dir)).toThrow(/ENOENT/);
  });
});
