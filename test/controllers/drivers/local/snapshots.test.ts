// Snapshots in the local driver (snapshots.ts): a running sandbox's disk is copied while it is
// frozen and put back running; sandboxes made from the snapshot see its files as they were (not
// the source's later writes) under their own hostname; the snapshot survives a new driver on the
// same data directory and its deletion leaves the sandboxes made from it intact; without disks the
// layer directory is what is copied.
import { mkdtempSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { DesiredSandbox } from "../../../../controllers/drivers/driver.ts";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { desiredSandbox, destroyAll, shIn } from "./fixture.ts";

const dataDir = mkdtempSync(join(tmpdir(), "local-snap-"));
const cgroupName = `kruise-test-${process.pid}-snap`;
let driver = new LocalDriver({ dataDir, cgroupName });
const noDiskDir = mkdtempSync(join(tmpdir(), "local-snap-nodisk-"));
const noDisk = new LocalDriver({ dataDir: noDiskDir, cgroupName: `${cgroupName}-nodisk`, disk: false });
// The host view only: the default store has `base` (the tier's global setup builds it), so
// `driver`'s sandboxes have a root of their own.
const hostViewDir = mkdtempSync(join(tmpdir(), "local-snap-host-"));
const hostView = new LocalDriver({ dataDir: hostViewDir, cgroupName: `${cgroupName}-host`, rootfs: false });

afterAll(async () => {
  await destroyAll(hostView, hostViewDir);
  await destroyAll(noDisk, noDiskDir);
  await destroyAll(driver, dataDir);
});

const desired = (over: Partial<DesiredSandbox> = {}) => desiredSandbox("sn", { resources: { cpuCount: 1, memoryMB: 256, diskSizeMB: 64 }, ...over });
const sh = (d: LocalDriver, id: string, script: string) => shIn(d, id, script);

describe("local snapshots", () => {
  it("copies a running sandbox's disk while frozen and leaves it running; 3 sandboxes from it see the files as they were, with their own hostname; they survive a new driver and the snapshot's deletion", async () => {
    const src = desired();
    await driver.ensure(src);
    // dir/h and hl: one file under two names (hard links), shifted to each copy's range once.
    await sh(driver, src.id, "mkdir -p /home/user/dir && echo one > /home/user/dir/a && ln -s dir/a /home/user/link && echo t > /tmp/t && echo h > /home/user/dir/h && ln /home/user/dir/h /home/user/hl");
    const snap = await driver.snapshotFs(src.id, `snap${process.pid}a`);
    expect(snap.id).toBe(`snap${process.pid}a`);
    // Put back as it was: running, not frozen.
    expect((await driver.observe(src.id))?.phase).toBe("Running");
    await sh(driver, src.id, "echo two > /home/user/dir/a; echo later > /home/user/later");
    // A new driver on the same data directory (an agent restart) still has it.
    await driver.dispose();
    driver = new LocalDriver({ dataDir, cgroupName });
    const copies = [desired(), desired(), desired()];
    for (const c of copies) await driver.ensure({ ...c, restoreFrom: { id: snap.id } });
    for (const c of copies) {
      const out = await sh(driver, c.id, "cat /home/user/link; cat /tmp/t; ls /home/user; stat -c %U /home/user/dir/a /home/user/dir/h /home/user/hl; cat /proc/sys/kernel/hostname; cat /etc/hostname");
      expect(out.stdout).toBe(`one\nt\ndir\nhl\nlink\nuser\nuser\nuser\n${c.id}\n${c.id}\n`);
    }
    // Each has its own disk: a write in one is not seen in another.
    await sh(driver, copies[0]!.id, "echo mine > /home/user/mine");
    expect((await sh(driver, copies[1]!.id, "ls /home/user")).stdout).toBe("dir\nhl\nlink\n");
    await driver.deleteSnapshot(snap);
    expect(readdirSync(join(dataDir, "snapshots")).filter((n) => !n.endsWith(".partial"))).toEqual([]);
    expect((await sh(driver, copies[0]!.id, "cat /home/user/mine /home/user/dir/a")).stdout).toBe("mine\none\n");
    // A sandbox made from a snapshot that is gone fails terminally, naming it.
    await expect(driver.ensure({ ...desired(), restoreFrom: { id: snap.id } })).rejects.toThrow(/snapshot .* does not exist/);
  });

  it("restoreFs of a running sandbox (host view) ends its processes before its files are put back, then starts it again", async () => {
    const d = desired();
    await hostView.ensure(d);
    expect((await sh(hostView, d.id, "test -e /usr/bin/python || echo host")).stdout).toBe("host\n");
    await sh(hostView, d.id, "echo one > /home/user/f");
    const snap = await hostView.snapshotFs(d.id, `snap${process.pid}r`);
    // A process that keeps writing the sandbox's files, detached from any command.
    await sh(hostView, d.id, "echo two > /home/user/f; (setsid sh -c 'while :; do echo x >> /home/user/w; sleep 0.01; done' </dev/null >/dev/null 2>&1 &)");
    // The writer is the session leader setsid made (`s` in its state). Counting every `sh -c while`
    // also counted, now and then, the loop's own fork for `sleep` before it exec'd (CI run 12-1: 2).
    const writing = `ps -eo stat=,args= | awk '$1 ~ /s/ && $2 == "sh" && $3 == "-c" && $4 == "while" { n++ } END { print n + 0 }'`;
    // Started in the background: give it up to 2 s to show.
    expect((await sh(hostView, d.id, `for i in $(seq 100); do c=$(${writing}); [ "$c" = 1 ] && break; sleep 0.02; done; echo "$c"`)).stdout).toBe("1\n");
    await hostView.restoreFs(d.id, snap);
    expect((await hostView.observe(d.id))?.phase).toBe("Running");
    // Nothing of the sandbox ran while its files were put back and changed owners (the writer
    // would have written /home/user/w again); it runs again on exactly the snapshot's files.
    expect((await sh(hostView, d.id, `${writing}; ls /home/user; cat /home/user/f; stat -c %U /home/user/f`)).stdout).toBe("0\nf\none\nuser\n");
    await hostView.deleteSnapshot(snap);
  });

  it("takes a Freeze-paused sandbox as it is and leaves it paused", async () => {
    const src = desired({ pauseStrategy: "Freeze" });
    await driver.ensure(src);
    await sh(driver, src.id, "echo paused > /home/user/p");
    expect((await driver.ensure({ ...src, generation: 2, state: "Paused" })).phase).toBe("Paused");
    const snap = await driver.snapshotFs(src.id, `snap${process.pid}b`);
    expect((await driver.observe(src.id))?.phase).toBe("Paused");
    const copy = desired();
    await driver.ensure({ ...copy, restoreFrom: snap });
    expect((await sh(driver, copy.id, "cat /home/user/p")).stdout).toBe("paused\n");
    await driver.deleteSnapshot(snap);
  });

  it("a snapshot freed while it is being copied (the edge gave up waiting) is never published", async () => {
    const src = desired();
    await driver.ensure(src);
    const id = `snap${process.pid}f`;
    const taking = driver.snapshotFs(src.id, id);
    await driver.deleteSnapshot({ id });
    await expect(taking).rejects.toThrow(/freed while it was being taken/);
    expect(readdirSync(join(dataDir, "snapshots")).filter((n) => n.startsWith(id))).toEqual([]);
    expect((await driver.observe(src.id))?.phase).toBe("Running");
  });

  it("without disks, copies the layer directory (owners kept)", async () => {
    const src = desired();
    await noDisk.ensure(src);
    // Links the tenant made: the snapshot's size is counted without following them (a link to `/`
    // made the agent walk the host's tree as root, on its event loop).
    await sh(noDisk, src.id, "echo layer > /home/user/l; ln -s / /home/user/hostroot; ln -s /usr /home/user/usr");
    const snap = await noDisk.snapshotFs(src.id, `snap${process.pid}c`);
    expect(snap.bytes).toBeLessThan(16 << 20);
    await sh(noDisk, src.id, "echo after > /home/user/after");
    const copy = desired();
    await noDisk.ensure({ ...copy, restoreFrom: snap });
    expect((await sh(noDisk, copy.id, "ls /home/user; stat -c %U /home/user/l; cat /proc/sys/kernel/hostname")).stdout).toBe(`hostroot\nl\nusr\nuser\n${copy.id}\n`);
    await noDisk.deleteSnapshot(snap);
  });
});
