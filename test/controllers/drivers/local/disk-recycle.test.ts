// A destroyed sandbox's disk image recycled into the spare stock (spare-disks.ts `recycle`,
// remove-tree.ts): the next tenant to get it finds nothing of the previous one, neither its files
// nor the blocks of files it wrote and deleted, read raw from the image on the host (root inside
// has no way to the loop device at all: no node for it, no mknod in its user namespace); an agent
// stopped midway leaves no half-reset disk to be taken, and the next agent recycles again.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, readSync, closeSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { DesiredSandbox } from "../../../../controllers/drivers/driver.ts";
import { isMounted } from "../../../../controllers/drivers/local/disk.ts";
import { layoutFor } from "../../../../controllers/drivers/local/layout.ts";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { desiredSandbox, pollUntil, shIn } from "./fixture.ts";

const dataDir = mkdtempSync(join(tmpdir(), "local-recycle-"));
const spares = join(dataDir, "spare-disks");
const cgroupName = `kruise-test-${process.pid}-recycle`;
let driver = new LocalDriver({ dataDir, cgroupName, spareDisks: 1 });
const ROOT = { name: "root", uid: 0, gid: 0, home: "/root", shell: "/bin/bash" };
/** Bytes no image holds unless a tenant wrote them (ext4 metadata never spells them). */
const MARK = "tenant-a-secret-7f3c9d";

afterAll(async () => {
  for (const s of await driver.list()) await driver.destroy(s.id);
  await driver.dispose();
  rmSync(dataDir, { recursive: true, force: true });
});

const desired = (over: Partial<DesiredSandbox> = {}) => desiredSandbox("rc", { resources: { cpuCount: 1, memoryMB: 256, diskSizeMB: 16 }, ...over });
/** Mounted spares of the stock, by directory name. */
const ready = () => readdirSync(spares).filter((n) => !n.endsWith(".new") && isMounted(join(spares, n, "disk")));
/** Loop devices whose backing file is under `dir` (what `losetup -a` lists). */
function loopsUnder(dir: string): string[] {
  return readdirSync("/sys/block")
    .filter((d) => d.startsWith("loop"))
    .flatMap((dev) => {
      try {
        const file = execFileSync("cat", [`/sys/block/${dev}/loop/backing_file`], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
        return file.startsWith(dir) ? [file] : [];
      } catch {
        return [];
      }
    });
}

/** How many times `mark` occurs in the file's raw bytes (read in chunks, the overlap kept). */
function occurrences(file: string, mark: string): number {
  const needle = Buffer.from(mark);
  const fd = openSync(file, "r");
  let n = 0;
  let carry = Buffer.alloc(0);
  try {
    const buf = Buffer.alloc(1 << 20);
    for (let got; (got = readSync(fd, buf, 0, buf.length, null)) > 0; ) {
      const hay = Buffer.concat([carry, buf.subarray(0, got)]);
      for (let i = hay.indexOf(needle); i >= 0; i = hay.indexOf(needle, i + 1)) n++;
      carry = hay.subarray(Math.max(0, hay.length - needle.length + 1));
    }
  } finally {
    closeSync(fd);
  }
  return n;
}

describe("a destroyed sandbox's disk recycled as a spare", () => {
  it("the next tenant on that image finds none of the last one's files, and the raw image holds none of its bytes, deleted ones included", async () => {
    const a = desired();
    await driver.ensure(a);
    expect(await pollUntil(ready, (r) => r.length === 1, 20_000)).toHaveLength(1);
    // Tenant A writes a file it keeps and one it deletes (its blocks stay in the image unless
    // freed), as root and as its user, and flushes both to the image.
    const write = `for i in $(seq 2000); do echo ${MARK}-$i; done`;
    await shIn(driver, a.id, `${write} > /home/user/kept; ${write} > /home/user/gone; sync; rm /home/user/gone; sync`);
    await shIn(driver, a.id, `${write} > /root/kept-by-root; sync`, ROOT);
    const image = layoutFor(dataDir, a.id, true).image;
    expect(occurrences(image, MARK)).toBeGreaterThanOrEqual(4000);
    const ino = statSync(image).ino;

    await driver.destroy(a.id);
    // The same image (never unlinked, so its inode is no one else's) is now a mounted spare.
    const recycled = (await pollUntil(ready, (r) => r.length === 2, 20_000)).find((n) => statSync(join(spares, n, "disk.img")).ino === ino);
    expect(recycled).toBeDefined();
    expect(loopsUnder(join(dataDir, "sandboxes"))).toEqual([]);
    expect(occurrences(join(spares, recycled!, "disk.img"), MARK)).toBe(0);

    // The next creates take both spares; the one on A's image is B's disk.
    const [b, c] = [desired(), desired()];
    await driver.ensure(b);
    await driver.ensure(c);
    const onIt = [b, c].find((d) => statSync(layoutFor(dataDir, d.id, true).image).ino === ino)!;
    expect(onIt).toBeDefined();
    const seen = await shIn(driver, onIt.id, `ls -A /home/user; ls -A /root; grep -rl ${MARK} / --exclude-dir=proc --exclude-dir=sys 2>/dev/null; echo end`, ROOT);
    expect(seen.stdout).not.toContain("kept");
    expect(seen.stdout).not.toContain(MARK);
    expect(seen.stdout).toContain("end");
    // Root inside cannot reach the block device the disk is on: no node for it, and none made.
    const raw = await shIn(driver, onIt.id, "ls /dev | grep -c loop; mknod /tmp/blk b 7 0 && head -c 1 /tmp/blk; echo rc=$?", ROOT);
    expect(raw.stdout).toMatch(/^0\n/);
    expect(raw.stdout).toMatch(/rc=[1-9]/);
    // Its own files work as on a new disk.
    expect((await shIn(driver, onIt.id, "echo fresh > /home/user/f && cat /home/user/f && df -m /home/user | tail -1 | awk '{print $2}'")).stdout).toMatch(/^fresh\n1[0-6]\n$/);
    for (const d of [b, c]) await driver.destroy(d.id);
  });

  it("an image whose file system lives on after the unmount (another mount of it, as a namespace being torn down holds one) is not reset under it", async () => {
    const a = desired();
    await driver.ensure(a);
    await shIn(driver, a.id, `echo ${MARK} > /home/user/still; sync`);
    const layout = layoutFor(dataDir, a.id, true);
    const ino = statSync(layout.image).ino;
    const elsewhere = mkdtempSync(join(tmpdir(), "local-recycle-bind-"));
    execFileSync("mount", ["--bind", layout.disk, elsewhere]);
    try {
      await driver.destroy(a.id);
      expect(ready().map((n) => statSync(join(spares, n, "disk.img")).ino)).not.toContain(ino);
      // The file system still reads what its tenant wrote from its image (O_DIRECT: through the
      // loop device to the file, not the page cache): nothing was truncated or formatted under it.
      const still = execFileSync("find", [elsewhere, "-name", "still"], { encoding: "utf8" }).trim();
      expect(still).toMatch(/still$/);
      expect(execFileSync("dd", [`if=${still}`, "iflag=direct", "bs=4096", "count=1", "status=none"], { encoding: "utf8" })).toBe(`${MARK}\n`);
    } finally {
      execFileSync("umount", [elsewhere]);
      rmSync(elsewhere, { recursive: true, force: true });
    }
    expect(await pollUntil(() => loopsUnder(dataDir).filter((f) => !f.startsWith(spares)), (l) => l.length === 0)).toEqual([]);
  });

  it("an image its tenant filled past the reset's bound is not reset on destroy's path: it is unlinked in the background, and no spare is made of it", async () => {
    const big = desiredSandbox("rc", { resources: { cpuCount: 1, memoryMB: 256, diskSizeMB: 160 } });
    await driver.ensure(big);
    const sized = () => readdirSync(spares).filter((n) => n.startsWith("160-") && !n.endsWith(".new") && isMounted(join(spares, n, "disk")));
    expect(await pollUntil(sized, (r) => r.length === 1, 20_000)).toHaveLength(1);
    await shIn(driver, big.id, "head -c 100M /dev/zero | tr '\\0' x > /home/user/big; sync");
    const ino = statSync(layoutFor(dataDir, big.id, true).image).ino;
    await driver.destroy(big.id);
    const images = () => readdirSync(join(dataDir, "trash")).filter((n) => n.startsWith(`${big.id}.`));
    expect(await pollUntil(images, (l) => l.length === 0, 20_000)).toEqual([]);
    expect(sized().map((n) => statSync(join(spares, n, "disk.img")).ino)).not.toContain(ino);
    expect(await pollUntil(() => readdirSync(spares).filter((n) => n.endsWith(".new")), (l) => l.length === 0)).toEqual([]);
  });

  it("an agent stopped mid-recycle leaves its half-reset disk out of the stock (discarded at the next start, never taken); the stock refills and recycles after the restart", async () => {
    const a = desired();
    await driver.ensure(a);
    await driver.destroy(a.id);
    const before = await pollUntil(ready, (r) => r.length >= 2, 20_000);
    expect(before.length).toBeGreaterThanOrEqual(2);
    // What a stop midway leaves: the staging directory of an offer, its image holding the last
    // tenant's bytes (stopped before the truncate) and even mounted (stopped before accept()).
    const half = join(spares, "16-0123456789ab.new");
    mkdirSync(join(half, "disk"), { recursive: true });
    const img = join(half, "disk.img");
    execFileSync("truncate", ["-s", "16M", img]);
    execFileSync("mkfs.ext4", ["-q", img]);
    execFileSync("mount", ["-o", "loop", img, join(half, "disk")]);
    writeFileSync(join(half, "disk", "left"), `${MARK}\n`);
    // dispose releases the spares it lists; the offer's directory is none of them.
    await driver.dispose();
    expect(isMounted(join(half, "disk"))).toBe(true);
    driver = new LocalDriver({ dataDir, cgroupName, spareDisks: 1 });
    expect(await pollUntil(() => existsSync(half), (e) => !e, 20_000)).toBe(false);
    expect(loopsUnder(half)).toEqual([]);
    const b = desired();
    await driver.ensure(b);
    expect((await shIn(driver, b.id, `grep -rl ${MARK} / --exclude-dir=proc --exclude-dir=sys 2>/dev/null; ls -A / /home/user; echo end`, ROOT)).stdout).not.toMatch(new RegExp(`${MARK}|left`));
    await driver.destroy(b.id);
    // Recycled again by the new agent: its spare plus B's image.
    expect((await pollUntil(ready, (r) => r.length >= 2, 20_000)).length).toBeGreaterThanOrEqual(2);
  });
});
