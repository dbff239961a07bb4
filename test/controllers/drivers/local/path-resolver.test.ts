// The SandboxView's path mapping on a real layout on disk, without starting a sandbox: every way a
// link or `..` could lead out of the sandbox must end inside it or be refused.
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { layoutFor, mountsFor, prepareLayout } from "../../../../controllers/drivers/local/layout.ts";
import { LocalSandboxView } from "../../../../controllers/drivers/local/local-view.ts";
import { PathOutsideSandboxError } from "../../../../controllers/runtime/sandbox-view.ts";

// Under the host's /tmp on purpose: a link to it must land in the sandbox's own /tmp.
const dataDir = mkdtempSync("/tmp/local-paths-");
const layout = layoutFor(dataDir, "p1");
mkdirSync(layout.dir, { recursive: true });
prepareLayout(layout, "p1");
const home = join(layout.layer, "home/user");
// Without namespaces every path maps to its host directory, which is what these cases check.
const view = new LocalSandboxView({ id: "p1", mounts: mountsFor(layout), namespaces: false, target: () => ({ cgroupProcs: [] }) });

mkdirSync(join(home, "dir"));
writeFileSync(join(home, "dir/file"), "x");
symlinkSync("/", join(home, "root"));
symlinkSync("../../../../../../../../etc/passwd", join(home, "up"));
symlinkSync("/etc/shadow", join(home, "shadow"));
symlinkSync("dir", join(home, "rel"));
symlinkSync("loop2", join(home, "loop1"));
symlinkSync("loop1", join(home, "loop2"));
symlinkSync(dataDir, join(home, "hostdir"));
symlinkSync("/work/main", join(home, "work"));
symlinkSync("/home/user/dir", join(home, "abs"));
symlinkSync("/tmp", join(home, "tmplink"));

afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

describe("local SandboxView paths", () => {
  it("maps the writable layer, the synthetic /etc and the base system", () => {
    expect(view.toHost("/home/user/dir/file")).toBe(join(home, "dir/file"));
    expect(view.toHost("/tmp/x")).toBe(join(layout.layer, "tmp/x"));
    expect(view.toHost("/etc/passwd")).toBe(join(layout.etc, "passwd"));
    expect(view.toHost("/usr/bin/env")).toBe("/usr/bin/env");
    expect(view.toHost("/bin/env")).toBe("/usr/bin/env");
    expect(view.toSandbox(join(home, "dir/file"))).toBe("/home/user/dir/file");
    expect(view.toSandbox(join(layout.etc, "hosts"))).toBe("/etc/hosts");
    expect(view.lookupUser("user")).toEqual({ name: "user", uid: 1000, gid: 1000, home: "/home/user", shell: "/bin/bash" });
  });

  it("resolves links as sandbox paths: absolute ones from the sandbox root, `..` stopping at /", () => {
    expect(view.toHost("/home/user/up")).toBe(join(layout.etc, "passwd"));
    expect(view.toHost("/home/user/shadow")).toBe(join(layout.etc, "shadow"));
    expect(view.toHost("/home/user/root/etc/hosts")).toBe(join(layout.etc, "hosts"));
    expect(view.toHost("/home/user/rel/file")).toBe(join(home, "dir/file"));
    expect(view.toHost("/home/user/abs/file")).toBe(join(home, "dir/file"));
    expect(view.toHost("/home/user/tmplink/a")).toBe(join(layout.layer, "tmp/a"));
    expect(view.toHost("/../../home/user/../../etc/passwd")).toBe(join(layout.etc, "passwd"));
    expect(view.toHost("/home/user/rel/../dir/file")).toBe(join(home, "dir/file"));
    // The host's data dir is under the host's /tmp; as a sandbox path it is the sandbox's /tmp.
    expect(view.toHost("/home/user/hostdir/sandboxes")).toBe(join(layout.layer, "tmp", dataDir.slice("/tmp/".length), "sandboxes"));
  });

  it("keeps a final link itself when asked not to follow it", () => {
    expect(view.toHost("/home/user/up", { followFinal: false })).toBe(join(home, "up"));
    expect(view.toHost("/home/user/rel/file", { followFinal: false })).toBe(join(home, "dir/file"));
  });

  it("refuses host paths, kernel file systems, link loops and relative paths", () => {
    for (const p of [
      "/home/user/work/package.json",
      "/work",
      "/home/other",
      "/opt/x",
      "/proc/1/root",
      "/home/user/root/proc/self/root/etc",
      "/dev/sda",
      "/sys/kernel",
      "/run/x",
      "/home/user/loop1",
      "home/user/dir",
    ]) {
      expect(() => view.toHost(p), p).toThrow(PathOutsideSandboxError);
    }
    expect(() => view.toSandbox("/work/main")).toThrow(PathOutsideSandboxError);
  });
});

describe("local SandboxView paths with a root filesystem of its own", () => {
  // The overlay's mount point stands in as a plain directory: the walk only reads it.
  const rooted = layoutFor(dataDir, "r1", false, true);
  const root = rooted.merged;
  for (const d of ["etc", "opt/app", "usr/bin", "home/user", "tmp"]) mkdirSync(join(root, d), { recursive: true });
  writeFileSync(join(root, "etc/passwd"), "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\nextra:x:1234:1234::/home/extra:/bin/sh\n");
  symlinkSync("/etc/passwd", join(root, "opt/abs"));
  symlinkSync("../../../../../../etc/passwd", join(root, "opt/up"));
  symlinkSync(dataDir, join(root, "opt/hostdir"));
  symlinkSync("usr/bin", join(root, "bin"));
  const v = new LocalSandboxView({ id: "r1", mounts: mountsFor(rooted), namespaces: true, target: () => ({ nsInit: { pid: 4242, start: "1" }, cgroupProcs: [] }) });

  it("maps every path to the sandbox's root, writable, links resolved inside it", () => {
    expect(v.toHost("/")).toBe(root);
    expect(v.toHost("/opt/app/new/file")).toBe(join(root, "opt/app/new/file"));
    expect(v.toHost("/srv/missing")).toBe(join(root, "srv/missing"));
    expect(v.toHost("/bin/env")).toBe(join(root, "usr/bin/env"));
    expect(v.toHost("/opt/abs")).toBe(join(root, "etc/passwd"));
    expect(v.toHost("/opt/up")).toBe(join(root, "etc/passwd"));
    expect(v.toHost("/opt/hostdir/sandboxes")).toBe(join(root, dataDir, "sandboxes"));
    expect(v.toSandbox(join(root, "opt/app"))).toBe("/opt/app");
    expect(v.toSandbox(root)).toBe("/");
  });

  it("reaches the kernel's directories through the holder, and users through the sandbox's /etc/passwd", () => {
    expect(v.toHost("/proc/1/status")).toBe("/proc/4242/root/proc/1/status");
    expect(v.toHost("/dev/shm/x")).toBe("/proc/4242/root/dev/shm/x");
    expect(v.lookupUser("extra")).toEqual({ name: "extra", uid: 1234, gid: 1234, home: "/home/extra", shell: "/bin/sh" });
    expect(v.userName(1234)).toBe("extra");
    expect(v.hostOwner(1000, 1000)).toEqual({ uid: 1000, gid: 1000 });
  });
});
