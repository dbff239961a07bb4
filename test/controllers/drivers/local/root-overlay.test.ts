// A root filesystem of its own per sandbox (root-overlay.ts): its `/` is an overlay of the `base`
// template's layers with the upper directory on its own disk, so it sees Debian's tree (not the
// host's), can write anywhere the kernel lets it, keeps what it wrote across a Stop pause and an
// agent restart, and a new sandbox starts clean. `base` is built (or reused) by the tier's global
// setup (test/support/base-rootfs-setup.ts).
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync, statfsSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { TerminalError } from "../../../../controllers/drivers/driver.ts";
import { isMounted } from "../../../../controllers/drivers/local/disk.ts";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { layoutFor } from "../../../../controllers/drivers/local/layout.ts";
import { RootfsStore } from "../../../../controllers/drivers/local/rootfs/store.ts";
import { desiredSandbox, destroyAll, shIn } from "./fixture.ts";

const store = new RootfsStore();
const dataDir = mkdtempSync(join(tmpdir(), "local-root-"));
const cgroupName = `kruise-test-${process.pid}-root`;
let driver = new LocalDriver({ dataDir, cgroupName });
const ROOT = { name: "root", uid: 0, gid: 0, home: "/root", shell: "/bin/bash" };
const sh = (id: string, script: string, user?: typeof ROOT) => shIn(driver, id, script, user);
const mountsUnder = (dir: string) => readFileSync("/proc/self/mountinfo", "utf8").split("\n").map((l) => l.split(" ")[4] ?? "").filter((p) => p.startsWith(dir));

afterAll(() => destroyAll(driver, dataDir));


describe("a root filesystem of its own", { timeout: 60_000 }, () => {
  it("sees the template's tree, not the host's: python, pip, node, git from Debian's packages; its own hostname files", async () => {
    const d = desiredSandbox("ro");
    await driver.ensure(d);
    // The host has no `python`; base has python-is-python3. dpkg's database is base's own.
    expect(existsSync("/usr/bin/python")).toBe(false);
    const r = await sh(d.id, "command -v python pip node git; python --version; pip --version | cut -d' ' -f1; node -e 'console.log(1+1)'; git --version | cut -d' ' -f1-2; dpkg-query -W -f='${Version}' python-is-python3 >/dev/null && echo dpkg-ok; cat /etc/hostname; grep -c $(hostname) /etc/hosts; test -s /etc/resolv.conf && echo resolv");
    expect(r.stderr).toBe("");
    expect(r.stdout).toBe(`/usr/bin/python\n/usr/bin/pip\n/usr/bin/node\n/usr/bin/git\n${r.stdout.match(/Python 3\.\d+\.\d+/)![0]}\npip\n2\ngit version\ndpkg-ok\n${d.id}\n1\nresolv\n`);
    // Nothing was written into the shared layer.
    const layer = store.templateTrees("base")![0]!;
    expect(readFileSync(join(layer, "etc/hostname"), "utf8")).not.toContain(d.id);
    await driver.destroy(d.id);
  });

  it("is mounted nodev on the host: a device node in its tree (a build step's mknod, as root) does not open from the host's side", async () => {
    const d = desiredSandbox("nodev");
    await driver.ensure(d);
    const merged = layoutFor(dataDir, d.id, true, true).merged;
    const options = readFileSync("/proc/self/mountinfo", "utf8").split("\n").find((l) => l.split(" ")[4] === merged)?.split(" ")[5] ?? "";
    expect(options.split(",")).toContain("nodev");
    // /dev/zero's numbers: what a build step could leave for the agent's files API, which opens
    // paths here as the host's root.
    execFileSync("mknod", [join(merged, "zero"), "c", "1", "5"]);
    expect(() => openSync(join(merged, "zero"), "r")).toThrow(/EACCES/);
    await driver.destroy(d.id);
  });

  it("writes anywhere the user may (root: /opt, /usr/local, /; user: its home and /tmp; user at /opt: EACCES); the view maps every path to the sandbox's own root", async () => {
    const d = desiredSandbox("rw");
    await driver.ensure(d);
    const asRoot = await sh(d.id, "echo a > /opt/a && mkdir -p /app && echo x > /app/x && echo top > /top && echo l > /usr/local/bin/l && cat /opt/a /app/x /top /usr/local/bin/l", ROOT);
    expect(asRoot).toMatchObject({ exitCode: 0, stdout: "a\nx\ntop\nl\n" });
    const asUser = await sh(d.id, "echo h > ~/h && echo t > /tmp/t && cat ~/h /tmp/t; echo no > /opt/u");
    expect(asUser.stdout).toBe("h\nt\n");
    expect(asUser.stderr).toContain("Permission denied");
    const view = driver.view(d.id);
    expect(readFileSync(view.toHost("/app/x"), "utf8")).toBe("x\n");
    expect(readdirSync(view.toHost("/"))).toEqual(expect.arrayContaining(["app", "top", "opt", "usr", "etc"]));
    expect(view.toSandbox(view.toHost("/opt/a"))).toBe("/opt/a");
    // The kernel's own file systems are the sandbox's, through its holder.
    expect(readFileSync(view.toHost("/proc/1/comm"), "utf8")).toBe("init\n"); // sandbox-init.ts
    expect(view.toHost("/etc/passwd")).toBe(join(layoutFor(dataDir, d.id, true, true).merged, "etc/passwd"));
    await driver.destroy(d.id);
  });

  it("starts with a near-empty private disk (≤ 1 MB used; the template is shared) and its mountinfo names no host path", async () => {
    const d = desiredSandbox("rd");
    await driver.ensure(d);
    const layout = layoutFor(dataDir, d.id, true, true);
    const s = statfsSync(layout.disk);
    expect((s.blocks - s.bfree) * s.bsize).toBeLessThanOrEqual(1024 * 1024);
    const info = (await sh(d.id, "cat /proc/self/mountinfo")).stdout;
    expect(info.split("\n")[0]).toMatch(/ \/ \/ .* - overlay overlay .*lowerdir=layers\/0,upperdir=disk\/upper,workdir=disk\/work/);
    for (const part of [dataDir, basename(dataDir), "/sandboxes/", store.root]) expect(info, part).not.toContain(part);
    await driver.destroy(d.id);
  });

  it("keeps writes anywhere across an agent restart and a Stop pause (root unmounted while stopped); a new sandbox does not see them; destroy leaves no mount", async () => {
    const d = desiredSandbox("rp", { pauseStrategy: "Stop" });
    await driver.ensure(d);
    const layout = layoutFor(dataDir, d.id, true, true);
    await sh(d.id, "mkdir -p /srv/k && echo kept > /srv/k/f && echo tmp > /tmp/t && echo etc >> /etc/hosts", ROOT);
    await driver.dispose();
    driver = new LocalDriver({ dataDir, cgroupName });
    expect((await driver.ensure(d)).phase).toBe("Running");
    expect((await sh(d.id, "cat /srv/k/f /tmp/t; tail -1 /etc/hosts")).stdout).toBe("kept\ntmp\netc\n");
    expect((await driver.ensure({ ...d, generation: 2, state: "Paused" })).phase).toBe("Stopped");
    expect(isMounted(layout.merged)).toBe(false);
    expect(isMounted(layout.disk)).toBe(false);
    await driver.dispose();
    driver = new LocalDriver({ dataDir, cgroupName });
    expect((await driver.ensure({ ...d, generation: 3, state: "Running" })).phase).toBe("Running");
    // The identity files are written once: what the sandbox changed stays.
    expect((await sh(d.id, "cat /srv/k/f /tmp/t; tail -1 /etc/hosts")).stdout).toBe("kept\ntmp\netc\n");
    const other = desiredSandbox("rp");
    await driver.ensure(other);
    expect((await sh(other.id, "ls /srv; cat /tmp/t 2>&1; tail -1 /etc/hosts")).stdout).toBe(`cat: /tmp/t: No such file or directory\n127.0.1.1\t${other.id}\n`);
    await driver.destroy(d.id);
    await driver.destroy(other.id);
    expect(mountsUnder(dataDir).filter((p) => p.includes(`/${d.id}`))).toEqual([]);
  });

  it("destroy leaves no mount when its one umount cannot take them all (a layer directory no mount point, a mount below a layer)", async () => {
    const d = desiredSandbox("rl");
    await driver.ensure(d);
    const layout = layoutFor(dataDir, d.id, true, true);
    mkdirSync(join(layout.dir, "layers", "9"));
    // The destroy's helper stops at the first target that fails (layers/0, busy with this nested
    // mount) with nothing deleted: the fallback unmounts the rest, so the test fails if it does not.
    const nested = join(layout.dir, "layers", "0", "tmp");
    execFileSync("mount", ["-t", "tmpfs", "none", nested]);
    expect(mountsUnder(layout.dir)).toContain(nested);
    await driver.destroy(d.id);
    // The destroy moves the sandbox's directory to the trash: a mount left would be there.
    expect(mountsUnder(dataDir).filter((p) => p.includes(`/${d.id}`))).toEqual([]);
    expect(existsSync(layout.dir)).toBe(false);
  });

  it("without a disk of its own (KRUISE_LOCAL_DISK=off) the upper directory is in the sandbox's directory; Freeze and Stop keep writes", async () => {
    const noDiskDir = mkdtempSync(join(tmpdir(), "local-root-nodisk-"));
    const noDisk = new LocalDriver({ dataDir: noDiskDir, cgroupName: `${cgroupName}n`, disk: false });
    try {
      const d = desiredSandbox("rn", { pauseStrategy: "Freeze" });
      await noDisk.ensure(d);
      const layout = layoutFor(noDiskDir, d.id, false, true);
      await shIn(noDisk, d.id, "echo w > /opt/w", ROOT);
      expect(readFileSync(join(layout.upper, "opt/w"), "utf8")).toBe("w\n");
      expect((await noDisk.ensure({ ...d, generation: 2, state: "Paused" })).phase).toBe("Paused");
      expect((await noDisk.ensure({ ...d, generation: 3, state: "Running" })).phase).toBe("Running");
      expect((await noDisk.ensure({ ...d, generation: 4, state: "Paused", pauseStrategy: "Stop" })).phase).toBe("Stopped");
      expect(isMounted(layout.merged)).toBe(false);
      expect((await noDisk.ensure({ ...d, generation: 5, state: "Running", pauseStrategy: "Stop" })).phase).toBe("Running");
      expect((await shIn(noDisk, d.id, "cat /opt/w")).stdout).toBe("w\n");
    } finally {
      await destroyAll(noDisk, noDiskDir);
    }
    expect(mountsUnder(noDiskDir)).toEqual([]);
  });

  it("an image that does not exist fails at once, naming it; without any root filesystem `base` is the host view", async () => {
    const d = desiredSandbox("rx", { template: "no-such-image" });
    const err = await driver.ensure(d).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TerminalError);
    expect((err as Error).message).toMatch(/^image "no-such-image" does not exist in .* \(templates: .*base/);
    await driver.destroy(d.id);
    const empty = mkdtempSync(join(tmpdir(), "local-root-store-"));
    const hostView = new LocalDriver({ dataDir: join(empty, "data"), cgroupName: `${cgroupName}h`, rootfs: new RootfsStore(join(empty, "rootfs")) });
    try {
      const h = desiredSandbox("rh");
      await hostView.ensure(h);
      // Today's view: the host's /usr (no `python`), the layer bound at /home/user.
      const r = await shIn(hostView, h.id, "test -e /usr/bin/python && echo python; grep ' /home/user ' /proc/self/mountinfo | cut -d' ' -f4");
      expect(r.stdout).toBe("/layer/home/user\n");
    } finally {
      await destroyAll(hostView, join(empty, "data"));
      rmSync(empty, { recursive: true, force: true });
    }
    expect(execFileSync("sh", ["-c", `grep -c ${empty} /proc/mounts || true`], { encoding: "utf8" }).trim()).toBe("0");
  });
});
