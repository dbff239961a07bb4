// Root inside, nothing outside (issue 11.3), through the real e2b SDK against the whole local
// system: a sandbox's uid 0 is an unprivileged host uid of its own range, `sudo` works for `user`,
// root inside mounts a tmpfs, and nothing it does reaches the host.
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../support/wait-for.ts";
import { e2b } from "./sdk.ts";

let sbx: Sandbox;
const hostDir = mkdtempSync(join(tmpdir(), "root-inside-host-"));
beforeAll(async () => {
  sbx = await Sandbox.create(e2b());
});
afterAll(async () => {
  await sbx?.kill().catch(() => false);
  rmSync(hostDir, { recursive: true, force: true });
});

/** The host range the sandbox's uid 0 is (from its own uid_map). */
async function range(): Promise<{ base: number; size: number }> {
  const map = (await sbx.commands.run("cat /proc/self/uid_map")).stdout.trim().split(/\s+/).map(Number);
  expect(map[0]).toBe(0);
  return { base: map[1]!, size: map[2]! };
}

describe("root inside, nothing outside", () => {
  it("id is root's inside; uid_map maps 0..65535 to an unprivileged host range", async () => {
    const id = await sbx.commands.run("id", { user: "root" });
    expect(id.stdout).toMatch(/^uid=0\(root\) gid=0\(root\)/);
    const r = await range();
    expect(r.size).toBe(65536);
    expect(r.base).toBeGreaterThanOrEqual(65536);
  });

  it("sudo works for user, and root inside mounts a tmpfs", async () => {
    const sudo = await sbx.commands.run("sudo whoami && sudo -n id -u");
    expect(sudo.stdout).toBe("root\n0\n");
    const mount = await sbx.commands.run("mount -t tmpfs none /mnt && echo in-tmpfs > /mnt/f && cat /mnt/f && grep -c ' /mnt ' /proc/self/mountinfo", { user: "root" });
    expect(mount.stdout).toBe("in-tmpfs\n1\n");
    // Not on the host.
    expect(readFileSync("/proc/self/mountinfo", "utf8")).not.toMatch(/ \/mnt tmpfs /);
  });

  it("root inside cannot touch a host file, nor reach the host's root through /proc/1/root", async () => {
    const file = join(hostDir, "host-file");
    writeFileSync(file, "untouched\n", { mode: 0o666 });
    const r = await sbx.commands.run(
      `echo changed > ${file}; echo changed > /proc/1/root${file}; cat /proc/1/root${file}; ls /proc/1/root${hostDir}; readlink /proc/self/ns/user; true`,
      { user: "root" },
    );
    expect(readFileSync(file, "utf8")).toBe("untouched\n");
    expect(r.stdout).not.toContain("untouched");
    // Its processes are in a user namespace that is not the host's (pid 1's links, /proc/1/ns
    // included, are not readable from inside: controllers/drivers/local/README.md "The sandbox's
    // pid 1").
    expect(r.stdout.trim().split("\n").at(-1)).toMatch(/^user:\[\d+\]$/);
    expect(r.stdout.trim().split("\n").at(-1)).not.toBe(readlinkSync("/proc/self/ns/user"));
  });

  it("ps on the host shows the sandbox's processes as uids of its range", async () => {
    const { base, size } = await range();
    const h = await sbx.commands.run("sleep 300", { background: true });
    const asRoot = await sbx.commands.run("sleep 301", { background: true, user: "root" });
    try {
      // A background command is started when its pid is known, but its `bash -l` may not have
      // exec'd sleep yet (CI under load saw only one of them): wait for both sleeps to show. (The
      // holder's own `sleep infinity`, root's, used to hide a late root sleep: the sandbox's pid 1
      // is the init now.)
      const ours = await waitFor(() => {
        const mine = hostProcesses().filter((p) => p.uidMap === `0 ${base} ${size}`);
        const sleeping = new Set(mine.filter((p) => p.name === "sleep").map((p) => p.uid));
        return sleeping.has(base) && sleeping.has(base + 1000) && mine;
      }, { what: "root's and the user's sleeps on the host" });
      const sleeps = ours.filter((p) => p.name === "sleep");
      // root's as the range's 0, user's as its 1000.
      expect(new Set(sleeps.map((p) => p.uid))).toEqual(new Set([base, base + 1000]));
      for (const p of ours) {
        expect(p.uid).toBeGreaterThanOrEqual(base);
        expect(p.uid).toBeLessThan(base + size);
      }
    } finally {
      await sbx.commands.kill(h.pid);
      await sbx.commands.kill(asRoot.pid);
    }
  });
});

interface HostProcess {
  pid: number;
  name: string;
  uid: number;
  uidMap: string;
}

/** Every process on the host as `ps` would list it, with its user namespace's first mapping. */
function hostProcesses(): HostProcess[] {
  const out: HostProcess[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const status = readFileSync(`/proc/${name}/status`, "utf8");
      const uidMap = readFileSync(`/proc/${name}/uid_map`, "utf8").trim().split("\n")[0]!.trim().split(/\s+/).join(" ");
      out.push({ pid: Number(name), name: /^Name:\s+(.*)$/m.exec(status)![1]!, uid: Number(/^Uid:\s+(\d+)/m.exec(status)![1]), uidMap });
    } catch {
      // gone meanwhile
    }
  }
  return out;
}
