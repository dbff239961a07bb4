// Every local sandbox of a built template is a machine of its own: its `/` is the template's
// root filesystem with its own writable layer on top, so E2B code that writes to /opt or /app
// works, `python` and `pip` are Debian's (the host has no `python`), what it writes survives a
// Stop pause and an agent restart, and a new sandbox starts clean. Runs its own system (it
// restarts the agent). Real e2b JS SDK. `base` is built (or reused) by the tier's global setup
// (test/support/base-rootfs-setup.ts).
import { FileType, Sandbox } from "e2b";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RootfsStore } from "../../controllers/drivers/local/rootfs/store.ts";
import { startSystem, type System } from "../../scripts/lib/system.ts";

const store = new RootfsStore();

let sys: System;
let dataDir: string;
const opts = () => ({ apiKey: sys.apiKey, apiUrl: sys.apiUrl, sandboxUrl: sys.apiUrl, requestTimeoutMs: 30_000 });

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), "sbx-rootfs-"));
  sys = await startSystem({ dataDir });
});
afterAll(async () => {
  await sys?.stop();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

describe("a root filesystem of its own", { timeout: 120_000 }, () => {
  it("a system started on a private data directory (mkdtemp's 0700, as npm start's .data was) runs sandboxes in a user namespace of their own", async () => {
    const sbx = await Sandbox.create(opts());
    try {
      // uid 0 inside is an unprivileged host uid (the range's base), not the host's root.
      const r = await sbx.commands.run("awk '{print $1, $2}' /proc/self/uid_map; id -u", { user: "root" });
      const [map, uid] = r.stdout.trim().split("\n");
      const [inside, outside] = map!.split(" ").map(Number);
      expect({ inside, uid }).toEqual({ inside: 0, uid: "0" });
      expect(outside).toBeGreaterThan(0);
    } finally {
      await sbx.kill();
    }
  });

  it("files.write/read/list anywhere: /opt/a, /app/x (parents made, owned by the user), /", async () => {
    const sbx = await Sandbox.create(opts());
    try {
      await sbx.files.write("/opt/a", "a");
      await sbx.files.write("/app/deep/x", "x");
      expect(await sbx.files.read("/opt/a")).toBe("a");
      expect(await sbx.files.read("/app/deep/x")).toBe("x");
      const top = await sbx.files.list("/");
      expect(top.map((e) => e.name)).toEqual(expect.arrayContaining(["app", "opt", "usr", "etc", "proc", "tmp"]));
      expect(top.find((e) => e.name === "app")).toMatchObject({ type: FileType.DIR, owner: "user", group: "user" });
      expect(await sbx.files.getInfo("/app/deep/x")).toMatchObject({ owner: "user", group: "user" });
      expect(await sbx.files.getInfo("/opt")).toMatchObject({ owner: "root", group: "root" });
      // The sandbox's processes see the same files; the user cannot write where Linux says no.
      const r = await sbx.commands.run("cat /opt/a /app/deep/x; stat -c %U /app/deep; touch /usr/u 2>&1 || true");
      expect(r.stdout).toBe("axuser\ntouch: cannot touch '/usr/u': Permission denied\n");
      // As root through the API too.
      await sbx.files.write("/usr/local/bin/tool", "#!/bin/sh\necho tool\n", { user: "root" });
      expect(await sbx.files.getInfo("/usr/local/bin/tool")).toMatchObject({ owner: "root" });
    } finally {
      await sbx.kill();
    }
  });

  it("python, pip, node and git are the template's (Debian's), not the host's", async () => {
    const sbx = await Sandbox.create(opts());
    try {
      // The host has no `python` at all; base has python-is-python3 in its own dpkg database.
      expect(existsSync("/usr/bin/python")).toBe(false);
      const r = await sbx.commands.run("python -c 'print(6*7)'; pip --version | cut -d' ' -f1; node -e 'console.log(typeof fetch)'; git --version | cut -d' ' -f1-2; dpkg -s python-is-python3 | grep -c '^Status: install ok installed'; cat /etc/debian_version | cut -d. -f1");
      expect(r.stdout).toBe("42\npip\nfunction\ngit version\n1\n12\n");
    } finally {
      await sbx.kill();
    }
  });

  it("writes anywhere survive a Stop pause and an agent restart; after kill a new sandbox does not see them", async () => {
    const sbx = await Sandbox.create(opts());
    try {
      await sbx.files.write("/opt/kept/f", "kept");
      await sbx.commands.run("mkdir -p /srv/app && echo inside > /srv/app/f && echo tmp > /tmp/t", { user: "root" });
      expect(await sbx.pause({ keepMemory: false })).toBe(true);
      await sys.stopAgent("SIGKILL");
      await sys.startAgent();
      const again = await Sandbox.connect(sbx.sandboxId, opts());
      const r = await again.commands.run("cat /opt/kept/f /srv/app/f /tmp/t");
      expect(r.stdout).toBe("keptinside\ntmp\n");
      await sys.stopAgent("SIGKILL");
      await sys.startAgent();
      const seen = await expect
        .poll(() => again.files.read("/srv/app/f").catch(() => undefined), { timeout: 30_000, interval: 250 })
        .toBe("inside\n")
        .then(() => true);
      expect(seen).toBe(true);
    } finally {
      await sbx.kill();
    }
    const fresh = await Sandbox.create(opts());
    try {
      const r = await fresh.commands.run("ls /opt /srv; test -e /tmp/t && echo tmp; true");
      expect(r.stdout).toBe("/opt:\n\n/srv:\n");
    } finally {
      await fresh.kill();
    }
  });
});
