// A disk of its own per sandbox (disk.ts): its writes are bounded by diskSizeMB with ENOSPC inside
// while the host's free space and other sandboxes are untouched; its mountinfo shows no host data
// directory; the disk follows the sandbox through an agent restart and a Stop pause; destroy, and
// the trash a killed agent left, leave no mount, loop device or image behind.
import { execFileSync } from "node:child_process";
import { rmSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, statSync, statfsSync, existsSync, watch } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, describe, expect, it, onTestFinished } from "vitest";
import type { DesiredSandbox } from "../../../../controllers/drivers/driver.ts";
import { isMounted } from "../../../../controllers/drivers/local/disk.ts";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { layoutFor } from "../../../../controllers/drivers/local/layout.ts";
import { readRecord } from "../../../../controllers/drivers/local/records.ts";
import { desiredSandbox, destroyAll, shIn } from "./fixture.ts";

const dataDir = mkdtempSync(join(tmpdir(), "local-disk-"));
const cgroupName = `kruise-test-${process.pid}-disk`;
let driver = new LocalDriver({ dataDir, cgroupName });
const MB = 1024 * 1024;

afterAll(() => destroyAll(driver, dataDir));

function desired(diskSizeMB: number, over: Partial<DesiredSandbox> = {}): DesiredSandbox {
  return desiredSandbox("dk", { resources: { cpuCount: 1, memoryMB: 256, diskSizeMB }, ...over });
}

const sh = (id: string, script: string, user?: Parameters<typeof shIn>[3]) => shIn(driver, id, script, user);
const ROOT = { name: "root", uid: 0, gid: 0, home: "/root", shell: "/bin/bash" };

/** Loop devices whose backing file is under `dir` (from sysfs: what `losetup -a` lists). */
function loopsUnder(dir: string): string[] {
  const out: string[] = [];
  for (const dev of readdirSync("/sys/block").filter((d) => d.startsWith("loop"))) {
    try {
      const file = readFileSync(`/sys/block/${dev}/loop/backing_file`, "utf8").trim();
      if (file.startsWith(dir)) out.push(`${dev} ${file}`);
    } catch {
      // not attached
    }
  }
  return out;
}

/** Mount points under `dir` in the host's mount table. */
const mountsUnder = (dir: string) => readFileSync("/proc/self/mountinfo", "utf8").split("\n").map((l) => l.split(" ")[4] ?? "").filter((p) => p.startsWith(dir));

const hostFree = () => {
  const s = statfsSync(dataDir);
  return s.bavail * s.bsize;
};

describe("a disk of its own per sandbox", () => {
  it("the host can give each sandbox a disk, and says so", () => {
    expect(driver.capabilities.disk).toBe("quota");
    expect(driver.capabilities.notes.join("\n")).toContain("disk: quota");
  });

  it("fills up at diskSizeMB with ENOSPC inside (home, /tmp, /root alike); the host's free space pays at most that; another sandbox keeps writing", async () => {
    const a = desired(32);
    const b = desired(32);
    onTestFinished(() => Promise.all([driver.destroy(a.id), driver.destroy(b.id)]).then(() => {}));
    await Promise.all([driver.ensure(a), driver.ensure(b)]);
    expect((await driver.observe(a.id))?.enforced.disk).toBe(true);
    const before = hostFree();
    const fill = await sh(a.id, "dd if=/dev/zero of=/home/user/fill bs=1M count=128 2>&1; echo exit=$?");
    expect(fill.stdout).toContain("No space left on device");
    expect(fill.stdout).not.toContain("exit=0");
    const after = hostFree();
    // Written inside: about the disk's size, never the 128 MB asked for.
    const written = Number((await sh(a.id, "stat -c %s /home/user/fill")).stdout.trim());
    expect(written).toBeGreaterThan(16 * MB);
    expect(written).toBeLessThanOrEqual(32 * MB);
    // What the host gave: the image's allocated blocks, and its free space (other work on the
    // machine may use some too, so the bound is the 128 MB the sandbox tried to write).
    const image = layoutFor(dataDir, a.id, true).image;
    expect(statSync(image).blocks * 512).toBeLessThanOrEqual(33 * MB);
    expect(before - after).toBeLessThan(96 * MB);
    // The rest of what it can write is the same disk.
    const full = "dd if=/dev/zero of=$f bs=1M count=8 2>&1 | grep -o 'No space left on device'";
    const asUser = await sh(a.id, `for f in /tmp/more /home/user/more; do ${full}; done`);
    const asRoot = await sh(a.id, `f=/root/more; ${full}`, ROOT);
    expect(asUser.stdout + asRoot.stdout).toBe("No space left on device\n".repeat(3));
    // The other sandbox is unaffected.
    const other = await sh(b.id, "dd if=/dev/zero of=/home/user/eight bs=1M count=8 2>&1 >/dev/null; echo exit=$?; stat -c %s /home/user/eight");
    expect(other.stdout).toContain("exit=0");
    expect(other.stdout.trim().endsWith(String(8 * MB))).toBe(true);
    // Freeing space inside makes room again.
    expect((await sh(a.id, "rm /home/user/fill && echo ok > /tmp/again && cat /tmp/again")).stdout.trim()).toBe("ok");
  });

  it("a disk larger than the host's free space is refused, saying so", async () => {
    const d = desired(1024 * 1024 * 1024);
    await expect(driver.ensure(d)).rejects.toThrow(/^a disk of 1073741824 MB is larger than the \d+ MB free on the host$/);
    await driver.destroy(d.id);
    expect(existsSync(layoutFor(dataDir, d.id).dir)).toBe(false);
  });

  it("its /proc/self/mountinfo shows paths inside its own disk, never the host's data directory", async () => {
    const d = desired(16);
    await driver.ensure(d);
    const info = (await sh(d.id, "cat /proc/self/mountinfo")).stdout;
    for (const part of [dataDir, basename(dataDir), "/sandboxes/", d.id + "/"]) expect(info, part).not.toContain(part);
    if (readRecord(layoutFor(dataDir, d.id).record)?.root) {
      // A root of its own (root-overlay.ts): the overlay names its upper directory inside the image.
      expect(info.split("\n")[0]).toMatch(/ \/ \/ .* - overlay overlay .*upperdir=disk\/upper,workdir=disk\/work/);
    } else {
      // The host view: the root field of the writable binds is a path inside the image.
      const home = info.split("\n").find((l) => l.split(" ")[4] === "/home/user")!;
      expect(home.split(" ")[3]).toBe("/layer/home/user");
    }
    await driver.destroy(d.id);
  });

  it("keeps its files across an agent restart and a Stop pause (unmounted while stopped); destroy leaves no mount, loop device or image", async () => {
    const d = desired(16, { pauseStrategy: "Stop" });
    await driver.ensure(d);
    const layout = layoutFor(dataDir, d.id, true);
    await sh(d.id, "echo kept > /home/user/kept");
    expect(loopsUnder(layout.dir)).toHaveLength(1);
    // A new agent on the same data directory adopts the running sandbox and its mounted disk.
    await driver.dispose();
    driver = new LocalDriver({ dataDir, cgroupName });
    expect((await driver.ensure(d)).phase).toBe("Running");
    expect((await sh(d.id, "cat /home/user/kept")).stdout).toBe("kept\n");
    expect(loopsUnder(layout.dir)).toHaveLength(1);
    // Stopped: no loop device held, the image kept.
    expect((await driver.ensure({ ...d, generation: 2, state: "Paused" })).phase).toBe("Stopped");
    expect(isMounted(layout.disk)).toBe(false);
    expect(loopsUnder(layout.dir)).toEqual([]);
    expect(existsSync(layout.image)).toBe(true);
    // A snapshot of the stopped sandbox mounts its disk for the copy only.
    const snap = await driver.snapshotFs(d.id);
    expect(isMounted(layout.disk)).toBe(false);
    const copy = desired(16);
    await driver.ensure({ ...copy, restoreFrom: snap });
    expect((await sh(copy.id, "cat /home/user/kept")).stdout).toBe("kept\n");
    await driver.destroy(copy.id);
    await driver.deleteSnapshot(snap);
    // A restart while stopped, then resume: mounted again, files there.
    await driver.dispose();
    driver = new LocalDriver({ dataDir, cgroupName });
    expect((await driver.ensure({ ...d, generation: 3, state: "Running" })).phase).toBe("Running");
    expect((await sh(d.id, "cat /home/user/kept")).stdout).toBe("kept\n");
    // What enters and leaves the trash during the destroy (inotify names both the rename in and
    // the unlink): the image must pass through it, not be deleted in place with the directory.
    const seen = new Set<string>();
    const watcher = watch(join(dataDir, "trash"), (_event, name) => {
      if (name) seen.add(name);
    });
    onTestFinished(() => watcher.close());
    await driver.destroy(d.id);
    expect(mountsUnder(layout.dir)).toEqual([]);
    expect(loopsUnder(layout.dir)).toEqual([]);
    expect(existsSync(layout.dir)).toBe(false);
    expect(loopsUnder(join(dataDir, "trash"))).toEqual([]);
    // The image (what the tenant wrote) went to the trash and is unlinked in the background.
    const images = () => readdirSync(join(dataDir, "trash")).filter((n) => n.startsWith(`${d.id}.`) && n.endsWith(".img"));
    for (let i = 0; i < 100 && images().length > 0; i++) await sleep(20);
    expect(images()).toEqual([]);
    expect([...seen].filter((n) => n.endsWith(".img"))).toEqual([expect.stringMatching(new RegExp(`^${d.id}\\.[0-9a-f]{8}\\.img$`))]);
  });

  it("with spare disks, a create takes one made ahead (the same image, mounted) and the next is made; dispose releases them all", async () => {
    const dir = mkdtempSync(join(tmpdir(), "local-disk-spare-"));
    const spares = join(dir, "spare-disks");
    const withSpares = new LocalDriver({ dataDir: dir, cgroupName: `${cgroupName}-spare`, spareDisks: 1 });
    const ready = () => readdirSync(spares).filter((n) => !n.endsWith(".new") && isMounted(join(spares, n, "disk")));
    const waitReady = async () => {
      for (let i = 0; i < 200 && ready().length === 0; i++) await sleep(50);
      return ready();
    };
    try {
      const first = desired(16);
      await withSpares.ensure(first);
      // The first create of a size formats its own disk; a spare of that size follows.
      const [spare] = await waitReady();
      expect(spare).toMatch(/^16-[0-9a-f]+$/);
      const ino = statSync(join(spares, spare!, "disk.img")).ino;
      const second = desired(16);
      await withSpares.ensure(second);
      const layout = layoutFor(dir, second.id, true);
      expect(statSync(layout.image).ino).toBe(ino);
      expect(existsSync(join(spares, spare!))).toBe(false);
      const run = (script: string) => shIn(withSpares, second.id, script);
      expect((await run("echo ok > /home/user/f && cat /home/user/f; hostname")).stdout).toBe(`ok\n${second.id}\n`);
      expect((await run("cat /proc/self/mountinfo")).stdout).not.toContain(dir);
      expect(await waitReady()).toHaveLength(1);
      for (const d of [first, second]) await withSpares.destroy(d.id);
      // Only the spare is left mounted; dispose unmounts and deletes it.
      expect(loopsUnder(dir)).toHaveLength(1);
      await withSpares.dispose();
      expect(loopsUnder(dir)).toEqual([]);
      expect(mountsUnder(dir)).toEqual([]);
    } finally {
      await withSpares.dispose();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("a disk still mounted in the trash (an agent killed mid-destroy) is unmounted, never deleted through, by the next agent", async () => {
    const d = desired(16);
    await driver.ensure(d);
    const layout = layoutFor(dataDir, d.id, true);
    await driver.destroy(d.id);
    // What a destroy interrupted after the move would leave: a mounted disk in the trash.
    const mount = join(dataDir, "sandboxes", "leftover", "disk");
    mkdirSync(mount, { recursive: true });
    const image = join(dataDir, "sandboxes", "leftover", "disk.img");
    execFileSync("truncate", ["-s", "16M", image]);
    execFileSync("mkfs.ext4", ["-q", image]);
    execFileSync("mount", ["-o", "loop", image, mount]);
    const trashed = join(dataDir, "trash", "leftover.x");
    renameSync(join(dataDir, "sandboxes", "leftover"), trashed);
    expect(isMounted(join(trashed, "disk"))).toBe(true);
    await driver.dispose();
    driver = new LocalDriver({ dataDir, cgroupName });
    expect(isMounted(join(trashed, "disk"))).toBe(false);
    for (let i = 0; i < 100 && existsSync(trashed); i++) await sleep(50);
    expect(existsSync(trashed)).toBe(false);
    expect(loopsUnder(dataDir)).toEqual([]);
    expect(existsSync(layout.dir)).toBe(false);
  });
});
