// The local driver's host-side helpers run as root in the host's namespaces until they have
// entered a sandbox and dropped privileges, so nothing a tenant sends may reach them as something
// they interpret: `driver.exec` with an environment that would run code in perl, the loader, a
// shell, node or python on start runs none of it on the host, while the command inside still gets
// every variable. And nothing a sandbox can read of its holder (pid 1's command line and
// environment, the other holder processes') names a host path.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import type { SandboxUser } from "../../../../controllers/runtime/sandbox-view.ts";
import { HOST_LOADER_SAW_IT, hostileEnv, parseEnv0 } from "../../../support/hostile-env.ts";
import { desiredSandbox, destroyAll, shIn, USER } from "./fixture.ts";

const dataDir = mkdtempSync(join(tmpdir(), "local-host-helpers-"));
const driver = new LocalDriver({ dataDir, cgroupName: `kruise-test-${process.pid}-helpers` });
const ROOT: SandboxUser = { name: "root", uid: 0, gid: 0, home: "/root", shell: "/bin/bash" };
afterAll(async () => {
  await destroyAll(driver, dataDir);
});

describe("host helpers never interpret what a tenant sends", () => {
  for (const user of [USER, ROOT]) {
    it(`driver.exec as ${user.name}: no payload runs on the host, the command still gets every variable`, async () => {
      const d = desiredSandbox("hh");
      const hostile = hostileEnv();
      try {
        await driver.ensure(d);
        const r = await driver.exec(d.id, { cmd: "/usr/bin/env", args: ["-0"], cwd: user.home, env: { PATH: "/usr/bin:/bin", ...hostile.env }, user }, { timeoutMs: 20_000 });
        expect(hostile.ran()).toEqual([]);
        expect(r.stderr).not.toContain(HOST_LOADER_SAW_IT);
        expect(r.exitCode).toBe(0);
        expect(parseEnv0(r.stdout)).toMatchObject(hostile.env);
      } finally {
        hostile.dispose();
        await driver.destroy(d.id);
      }
    });
  }

  it("an environment entry that is not NAME=value is refused, not passed on half-read", async () => {
    const d = desiredSandbox("hh");
    await driver.ensure(d);
    await expect(driver.exec(d.id, { cmd: "/usr/bin/env", args: [], cwd: USER.home, env: { "A=B": "c" }, user: USER })).rejects.toThrow(/environment variable name/);
    await expect(driver.exec(d.id, { cmd: "/usr/bin/env", args: [], cwd: USER.home, env: { A: "b\0c" }, user: USER })).rejects.toThrow(/NUL/);
    await driver.destroy(d.id);
  });
});

describe("what a sandbox sees of its holder", () => {
  it("pid 1's command line and environment, and every process's, name no host path", async () => {
    const d = desiredSandbox("hh");
    await driver.ensure(d);
    for (const user of [USER, ROOT]) {
      const r = await shIn(driver, d.id, "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; tr '\\0' ' ' < $p/environ; echo; done 2>/dev/null; true", user);
      const pid1 = await shIn(driver, d.id, "tr '\\0' ' ' < /proc/1/cmdline", user);
      expect(pid1.stdout).toMatch(/\S/);
      for (const text of [r.stdout, pid1.stdout]) {
        expect(text).not.toContain(dataDir);
        expect(text).not.toContain("/sys/fs/cgroup");
        expect(text).not.toMatch(/--(ro-)?bind/);
      }
    }
    await driver.destroy(d.id);
  });
});
