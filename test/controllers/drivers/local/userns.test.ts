// A sandbox's user namespace (README.md "User namespace"): uid 0 inside is an unprivileged host
// uid of the sandbox's own range, root inside has a container's capabilities over what the
// sandbox owns (it mounts a tmpfs) and nothing on the host, and the range survives an agent
// restart and a Stop pause. Without a user namespace (KRUISE_LOCAL_USERNS=off) root inside keeps
// no capabilities and no-new-privs, as before.
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { helperEnv, PERL, syscallNumbers } from "../../../../controllers/drivers/local/host-helpers.ts";
import { procStart } from "../../../../controllers/drivers/local/holder.ts";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { USERNS_SCRIPT } from "../../../../controllers/drivers/local/userns.ts";
import { readRecord } from "../../../../controllers/drivers/local/records.ts";
import type { SandboxUser } from "../../../../controllers/runtime/sandbox-view.ts";
import { desiredSandbox, destroyAll, shIn, USER } from "./fixture.ts";

const ROOT: SandboxUser = { name: "root", uid: 0, gid: 0, home: "/root", shell: "/bin/bash" };
const dataDir = mkdtempSync(join(tmpdir(), "local-userns-"));
const cgroupName = `kruise-test-${process.pid}-userns`;
let driver = new LocalDriver({ dataDir, cgroupName });
const plainDir = mkdtempSync(join(tmpdir(), "local-nouserns-"));
const plain = new LocalDriver({ dataDir: plainDir, cgroupName: `${cgroupName}-off`, userns: false });
afterAll(async () => {
  await destroyAll(driver, dataDir);
  await destroyAll(plain, plainDir);
});

const range = (id: string) => readRecord(join(dataDir, "sandboxes", id, "record.json"))!.userns!;
/** Host uids (real, effective) of a host pid. */
const hostUids = (pid: number) => /^Uid:\s+(\d+)\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))!.slice(1, 3).map(Number);

describe("user namespace", () => {
  it("root inside is uid 0 of a host range of its own; the map shows it; its processes are that range on the host", async () => {
    const a = desiredSandbox("un");
    const b = desiredSandbox("un");
    await driver.ensure(a);
    await driver.ensure(b);
    const ra = range(a.id);
    const rb = range(b.id);
    expect(ra.size).toBe(65536);
    expect(ra.base).toBeGreaterThanOrEqual(2 ** 20);
    expect(ra.base + ra.size <= rb.base || rb.base + rb.size <= ra.base).toBe(true);

    const id = await shIn(driver, a.id, "id -u; id -g; cat /proc/self/uid_map /proc/self/gid_map", ROOT);
    expect(id.stdout.split("\n").slice(0, 2)).toEqual(["0", "0"]);
    expect(id.stdout).toMatch(new RegExp(`^\\s*0\\s+${ra.base}\\s+65536$`, "m"));
    expect(id.stdout.match(/65536/g)).toHaveLength(2);

    // A command that stays: its host uid is in the range (root = base, user = base + 1000).
    const root = await shIn(driver, a.id, "sleep 30 >/dev/null 2>&1 & echo $!", ROOT);
    const user = await shIn(driver, a.id, "sleep 30 >/dev/null 2>&1 & echo $!");
    const hostPidOf = (inside: string) => hostPidIn(readRecord(join(dataDir, "sandboxes", a.id, "record.json"))!.nsInit!.pid, Number(inside));
    expect(hostUids(hostPidOf(root.stdout))).toEqual([ra.base, ra.base]);
    expect(hostUids(hostPidOf(user.stdout))).toEqual([ra.base + 1000, ra.base + 1000]);
    // The holder itself runs as the range's root on the host, never host root.
    const rec = readRecord(join(dataDir, "sandboxes", a.id, "record.json"))!;
    expect(hostUids(rec.holder!.pid)).toEqual([ra.base, ra.base]);
    expect(hostUids(rec.nsInit!.pid)).toEqual([ra.base, ra.base]);
    // What it writes belongs to the range on the host; the template's files, owned by host root
    // and shared, show as its root's (ID-mapped layers) without a copy.
    const rooted = rec.root !== undefined;
    const upper = rooted ? join(dataDir, "sandboxes", a.id, "disk", "upper") : join(dataDir, "sandboxes", a.id, "disk", "layer", "root");
    expect(statSync(upper).uid).toBe(ra.base);
    const owners = await shIn(driver, a.id, "touch /home/user/mine; stat -c %U /home/user/mine /home/user /root /usr/bin/env /");
    expect(owners.stdout).toBe(rooted ? "user\nuser\nroot\nroot\nroot\n" : "user\nuser\nroot\nnobody\nnobody\n");
    const view = driver.view(a.id);
    expect(statSync(view.toHost("/home/user/mine")).uid).toBe(ra.base + 1000);
    expect(view.userName!(ra.base + 1000)).toBe("user");
    expect(view.hostOwner!(1000, 1000)).toEqual({ uid: ra.base + 1000, gid: ra.base + 1000 });
  });

  it("sudo works for `user` where the template has it, and root's capabilities stay inside", async () => {
    const d = desiredSandbox("un");
    await driver.ensure(d);
    // The tier's global setup builds base, so the sandbox has its root (the host view has no sudo).
    expect(readRecord(join(dataDir, "sandboxes", d.id, "record.json"))!.root).toBeDefined();
    const r = await shIn(driver, d.id, "sudo -n whoami; sudo -n id -u; sudo -n mount -t tmpfs none /mnt && sudo -n touch /mnt/x && echo mounted; sudo -n sh -c 'echo hi > /opt/by-root' && stat -c %U /opt/by-root");
    expect(r.stdout).toBe("root\n0\nmounted\nroot\n");
    // The layers' ID-mapped mounts on the host (under directories other uids may pass) are nodev
    // and nosuid: a device node or setuid file a build step left there is inert through them,
    // while the overlay inside (its own flags) keeps sudo working, above.
    const layers = join(dataDir, "sandboxes", d.id, "layers");
    const mounts = readFileSync("/proc/self/mountinfo", "utf8").split("\n").filter((l) => l.split(" ")[4]?.startsWith(`${layers}/`));
    expect(mounts.length).toBeGreaterThan(0);
    for (const m of mounts) expect(m.split(" ")[5]!.split(",")).toEqual(expect.arrayContaining(["ro", "nosuid", "nodev", "idmapped"]));
    const range0 = range(d.id).base;
    expect(statSync(join(dataDir, "sandboxes", d.id, "disk", "upper", "opt", "by-root")).uid).toBe(range0);
  });

  it("root inside mounts a tmpfs, keeps a container's capabilities, and still cannot touch the host", async () => {
    const d = desiredSandbox("un");
    await driver.ensure(d);
    const r = await shIn(driver, d.id, "mkdir -p /root/m && mount -t tmpfs none /root/m && echo hi > /root/m/f && cat /root/m/f && grep -E '^(CapBnd|NoNewPrivs)' /proc/self/status", ROOT);
    expect(r.stderr).toBe("");
    expect(r.stdout).toMatch(/^hi$/m);
    // Docker's default set plus CAP_SYS_ADMIN (bit 21), without CAP_NET_RAW (bit 13) as the egress
    // fast path is on (the default; README "The sandbox cannot undo it"), and setuid programs may
    // raise privileges.
    expect(r.stdout).toMatch(/^CapBnd:\s+00000000a82405fb$/m);
    expect(r.stdout).toMatch(/^NoNewPrivs:\s+0$/m);
    // The host never sees that mount.
    expect(readFileSync("/proc/self/mountinfo", "utf8")).not.toContain("/root/m");

    // A host file it could only reach through a host path: the host's pid 1 root is not in its
    // pid namespace, the file is owned by host root, which it is not.
    const secret = join(dataDir, "host-secret");
    writeFileSync(secret, "host\n", { mode: 0o644 });
    const esc = await shIn(driver, d.id, `cat /proc/1/root${secret} 2>&1; echo x > /proc/1/root${secret} 2>&1; ls /proc/1/root/ 2>&1 | head -3; mount --bind / /mnt 2>&1 && ls /mnt${dataDir} 2>&1; true`, ROOT);
    expect(readFileSync(secret, "utf8")).toBe("host\n");
    expect(esc.stdout).not.toContain("host\n");
    // Not root of the host: kill the agent, or write a file owned by host root.
    const host = await shIn(driver, d.id, `kill -0 ${process.pid} 2>&1; echo $?`, ROOT);
    expect(host.stdout.trim().split("\n").at(-1)).toBe("1");
  });

  it("an agent restart and a Stop pause keep the range; destroy frees it", async () => {
    const d = desiredSandbox("un");
    await driver.ensure(d);
    const before = range(d.id);
    await shIn(driver, d.id, "echo kept > /home/user/f");
    await driver.dispose();
    driver = new LocalDriver({ dataDir, cgroupName });
    expect((await driver.list()).map((s) => s.id)).toContain(d.id);
    expect((await shIn(driver, d.id, "cat /proc/self/uid_map; cat /home/user/f; id -u")).stdout).toMatch(new RegExp(`${before.base}\\s+65536\\n+kept\\n1000`));
    await driver.ensure({ ...d, generation: 2, state: "Paused", pauseStrategy: "Stop" });
    await driver.ensure({ ...d, generation: 3, state: "Running" });
    expect(range(d.id)).toEqual(before);
    const r = await shIn(driver, d.id, "cat /home/user/f; touch /home/user/g && stat -c %u /home/user/g");
    expect(r.stdout).toBe("kept\n1000\n");
    await driver.destroy(d.id);
    expect(() => readFileSync(`/run/kruise-uids/${before.base}`)).toThrow();
  });
});

describe("userns.pl's requests (it runs as host root; allow-setuid.pl runs in a child it forks)", () => {
  it("only `allow-setuid`, a pid:start and two numbers are taken; a holder in the host's user namespace is refused, the host's `/` untouched", () => {
    const nr = syscallNumbers();
    const rootBefore = readFileSync("/proc/self/mountinfo", "utf8").split("\n").find((l) => l.split(" ")[4] === "/");
    const requests = [
      "allow-setuid 1;touch${IFS}/tmp/x 2 3",
      "allow-setuid 1 2",
      "allow-setuid 1 2 3 4",
      "allow-setuid -1 2 3",
      "allow-setuid 1 0x2 3",
      "sh -c id 1",
      "allow-setuid\t1 2 3\u0000",
      // Well formed, but the pid is a host process (a holder's pid reused, say): allow-setuid.pl
      // refuses to remount what it would see as `/`.
      `allow-setuid ${process.pid}:${procStart(process.pid)} ${nr.setns} ${nr.mount}`,
    ];
    const r = spawnSync(PERL, [USERNS_SCRIPT, "3000000000", "1", String(nr.unshare), String(nr.openTree), String(nr.mountSetattr), String(nr.moveMount)], {
      env: helperEnv(),
      input: requests.map((l) => `${l}\n`).join(""),
      encoding: "utf8",
      timeout: 20_000,
    });
    expect(r.status).toBe(0);
    const [pid, ...answers] = r.stdout.split("\n").slice(0, -1);
    expect(pid).toMatch(/^\d+$/);
    expect(answers).toEqual([...Array(7).fill("bad request"), "allow-setuid: exit 127"]);
    expect(r.stderr).toContain("the holder shares the host's user namespace");
    expect(readFileSync("/proc/self/mountinfo", "utf8").split("\n").find((l) => l.split(" ")[4] === "/")).toBe(rootBefore);
  });
});

describe("userns.pl's overlay (the sandbox's root, mounted by the helper that made its ID-mapped layers)", () => {
  const nr = syscallNumbers();
  const base = 3000000000;
  /** userns.pl with one layer (`src`) and `overlay` as given; its stdin ends at once. */
  const run = (dir: string, overlay: string[]) =>
    spawnSync(PERL, [USERNS_SCRIPT, String(base), "65536", String(nr.unshare), String(nr.openTree), String(nr.mountSetattr), String(nr.moveMount), join(dir, "src"), join(dir, "layers/0"), ...overlay], {
      env: helperEnv(),
      input: "",
      encoding: "utf8",
      timeout: 20_000,
    });
  const mountsIn = (dir: string) => readFileSync("/proc/self/mountinfo", "utf8").split("\n").filter((l) => l.split(" ")[4]?.startsWith(`${dir}/`));
  const scratch = () => {
    const dir = mkdtempSync(join(tmpdir(), "local-userns-overlay-"));
    for (const d of ["src/etc", "layers/0", "upper", "work", "root"]) mkdirSync(join(dir, d), { recursive: true });
    writeFileSync(join(dir, "src/etc/os"), "template\n");
    return dir;
  };
  const cleanUp = (dir: string) => {
    for (const at of ["root", "layers/0"]) spawnSync("umount", [join(dir, at)]);
    rmSync(dir, { recursive: true, force: true });
  };

  it("mounts the overlay on the ID-mapped layer: the layer's files show as the range's root, writes land in the upper", () => {
    const dir = scratch();
    try {
      const r = run(dir, ["overlay", String(nr.mount), dir, "lowerdir=layers/0,upperdir=upper,workdir=work", join(dir, "root")]);
      expect(r.stderr).toBe("");
      expect(r.status).toBe(0);
      expect(readFileSync(join(dir, "root/etc/os"), "utf8")).toBe("template\n");
      expect(statSync(join(dir, "root/etc/os")).uid).toBe(base);
      writeFileSync(join(dir, "root/etc/hostname"), "sbx\n");
      expect(readFileSync(join(dir, "upper/etc/hostname"), "utf8")).toBe("sbx\n");
      expect(readdirSync(join(dir, "src/etc"))).toEqual(["os"]);
    } finally {
      cleanUp(dir);
    }
  });

  it("refuses a malformed overlay group before making any mount", () => {
    const dir = scratch();
    try {
      for (const overlay of [
        ["overlay", String(nr.mount), "relative", "lowerdir=layers/0,upperdir=upper,workdir=work", join(dir, "root")],
        ["overlay", String(nr.mount), dir, "lowerdir=layers/0,upperdir=upper workdir=work", join(dir, "root")],
        ["overlay", String(nr.mount), dir, "upperdir=upper,workdir=work", join(dir, "root")],
        ["overlay", "0x10", dir, "lowerdir=layers/0,upperdir=upper,workdir=work", join(dir, "root")],
        ["overlay", String(nr.mount), dir, "lowerdir=layers/0,upperdir=upper,workdir=work", join(dir, "root"), "extra"],
        ["overlay", String(nr.mount), dir, "lowerdir=layers/0,upperdir=upper,workdir=work"],
      ]) {
        const r = run(dir, overlay);
        expect(r.status).toBe(127);
        expect(r.stderr).toBe("userns.pl: bad arguments\n");
        expect(mountsIn(dir)).toEqual([]);
      }
    } finally {
      cleanUp(dir);
    }
  });
});

describe("without a user namespace", () => {
  it("root inside has no capabilities and no-new-privs, as before", async () => {
    const d = desiredSandbox("nu");
    await plain.ensure(d);
    expect(readRecord(join(plainDir, "sandboxes", d.id, "record.json"))!.userns).toBeUndefined();
    const r = await shIn(plain, d.id, "id -u; grep -E '^(CapBnd|NoNewPrivs)' /proc/self/status; cat /proc/self/uid_map; mount -t tmpfs none /tmp 2>&1 || echo refused", ROOT);
    expect(r.stdout).toMatch(/^0\nCapBnd:\s+0000000000000000\nNoNewPrivs:\s+1\n\s+0\s+0\s+4294967295\n/);
    expect(r.stdout).toMatch(/refused/);
  });
});

/** The host pid of the process that is `inside` in the pid namespace of host pid `init`. */
function hostPidIn(init: number, inside: number): number {
  const ns = readlinkSync(`/proc/${init}/ns/pid`);
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readlinkSync(`/proc/${name}/ns/pid`) !== ns) continue;
      const nspid = /^NSpid:\s+(.*)$/m.exec(readFileSync(`/proc/${name}/status`, "utf8"))![1]!.trim().split(/\s+/);
      if (Number(nspid.at(-1)) === inside) return Number(name);
    } catch {
      // gone
    }
  }
  throw new Error(`no host pid for ${inside} in the namespace of ${init}`);
}
