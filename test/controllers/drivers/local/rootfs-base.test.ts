// The `base` template rootfs built from Debian packages (mmdebstrap). SLOW THE FIRST TIME: with an
// empty cache this builds it (minutes; `.ci/run` builds it before the tests so CI never does it
// here). Needs root and mmdebstrap. Each check runs as a real process chrooted into an overlay of
// the layer (the layer itself stays untouched), in fresh mount, pid and network namespaces: no
// network inside.
import { execFile } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureBaseRootfs, type BaseRootfs } from "../../../../controllers/drivers/local/rootfs/build-base.ts";
import { importImage } from "../../../../controllers/drivers/local/rootfs/image-import.ts";
import { RootfsStore } from "../../../../controllers/drivers/local/rootfs/store.ts";

const run = promisify(execFile);
const store = new RootfsStore();
let base: BaseRootfs;
let work: string;

/** `script` as root under bash inside an overlay of the base layer; stdout. */
async function inBase(script: string): Promise<string> {
  const w = mkdtempSync(join(work, "o-"));
  for (const d of ["upper", "work", "merged"]) mkdirSync(join(w, d));
  const m = join(w, "merged");
  const outer = [
    "mount --make-rprivate /",
    `mount -t overlay overlay -o lowerdir=${base.tree},upperdir=${w}/upper,workdir=${w}/work ${m}`,
    `mount -t proc proc ${m}/proc`,
    `mount --rbind /dev ${m}/dev`,
    `mount -t tmpfs tmpfs ${m}/tmp`,
    `exec chroot ${m} /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root /bin/bash -euo pipefail -c "$0" </dev/null`,
  ].join(" && ");
  const { stdout } = await run("unshare", ["--mount", "--net", "--pid", "--fork", "sh", "-eu", "-c", outer, script], { timeout: 110_000, maxBuffer: 4 << 20 });
  return stdout;
}

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), "rootfs-base-"));
  base = await ensureBaseRootfs(store, (line) => console.log(`[rootfs] ${line}`));
}, 45 * 60_000);
afterAll(() => rmSync(work, { recursive: true, force: true }), 10 * 60_000); // two ~500 MB trees

describe("the base template rootfs (built with mmdebstrap, cached)", { timeout: 120_000 }, () => {
  it("is registered as `base` with a package manifest", () => {
    expect(store.template("base")?.layers).toEqual([base.id]);
    expect(store.templateTrees("base")).toEqual([base.tree]);
    const names = store.manifest(base.id)!.split("\n").map((l) => l.split("\t")[0]);
    for (const p of ["python3", "python3-pip", "python3-venv", "python-is-python3", "nodejs", "npm", "git", "curl", "ca-certificates", "sudo", "bash", "coreutils", "procps", "iproute2"]) {
      expect(names).toContain(p);
    }
  });

  it("runs python, venv, pip, node, npm, git, curl, ps and ip inside", async () => {
    const out = await inBase(`
      echo "python=$(python --version)"
      python3 -m venv /tmp/v && echo "venv=$(/tmp/v/bin/python -c 'import sys; print(sys.prefix)')"
      echo "pip=$(/tmp/v/bin/pip --version)"
      echo "node=$(node --version)"
      echo "npm=$(npm --version 2>/dev/null)"
      echo "git=$(git --version)"
      echo "curl=$(curl --version | head -n1)"
      echo "ps=$(ps -o pid= -p $$ | tr -d ' ')"
      echo "ip=$(ip -o link show lo | cut -d' ' -f2)"
      echo "certs=$(ls /etc/ssl/certs | wc -l)"`);
    const v = Object.fromEntries(out.trim().split("\n").map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1)]));
    expect(v.python).toMatch(/^Python 3\.\d+\.\d+$/);
    expect(v.venv).toBe("/tmp/v");
    expect(v.pip).toMatch(/^pip \d+.* from \/tmp\/v\//);
    expect(v.node).toMatch(/^v\d+\.\d+\.\d+$/);
    expect(v.npm).toMatch(/^\d+\.\d+\.\d+$/);
    expect(v.git).toMatch(/^git version \d/);
    expect(v.curl).toMatch(/^curl \d/);
    expect(Number(v.ps)).toBeGreaterThan(0);
    expect(v.ip).toBe("lo:");
    expect(Number(v.certs)).toBeGreaterThan(50);
    // The overlay took the writes: the shared layer has no venv.
    expect(existsSync(join(base.tree, "tmp", "v"))).toBe(false);
  });

  it("has `user` (uid 1000, /home/user, bash) with passwordless sudo, and root", async () => {
    const out = await inBase(`
      id user
      getent passwd user root
      sudo -n -u user true && echo sudo-to-user
      runuser -u user -- sudo -n id -un
      runuser -u user -- bash -c 'echo "$HOME $(id -u):$(id -g)"'`);
    expect(out.split("\n")).toEqual([
      "uid=1000(user) gid=1000(user) groups=1000(user)",
      "user:x:1000:1000::/home/user:/bin/bash",
      expect.stringMatching(/^root:x:0:0:root:\/root:\/bin\/bash$/),
      "sudo-to-user",
      "root",
      "/home/user 1000:1000",
      "",
    ]);
    expect(statSync(join(base.tree, "etc/sudoers.d/user")).mode & 0o7777).toBe(0o440);
    expect(statSync(join(base.tree, "home/user")).uid).toBe(1000);
  });

  it("comes back identical through `docker save` form and the importer (a real Debian tree)", async () => {
    const img = join(work, "img");
    mkdirSync(img);
    await run("tar", ["--numeric-owner", "-C", base.tree, "-cf", join(img, "layer.tar"), "."], { timeout: 110_000 });
    writeFileSync(join(img, "manifest.json"), JSON.stringify([{ Config: "c.json", Layers: ["layer.tar"] }]));
    const imported = new RootfsStore(join(work, "store"));
    const t = await importImage(imported, img, "again");
    // Modes (set-id bits included), owners, sizes, symlink targets, content; not device nodes (a
    // sandbox's /dev is made at start) nor directory sizes (ext4's block counts).
    const listing = async (dir: string) =>
      (await run("sh", ["-c", `cd "$0" && { find . -type d -printf '%P %M %U %G\\n'; find . ! -type d ! -type c ! -type b -printf '%P %M %U %G %l %s\\n'; } | sort && find . -type f -print0 | sort -z | xargs -0 sha256sum`, dir], { maxBuffer: 64 << 20, timeout: 110_000 })).stdout;
    const [want, got] = [await listing(base.tree), await listing(imported.layerTree(t.layers[0]!))];
    expect(got.length).toBeGreaterThan(1_000_000);
    expect(got === want).toBe(true);
    expect(imported.layer(t.layers[0]!)?.source.skipped).toEqual(expect.arrayContaining(["./dev/null"]));
  }, 10 * 60_000); // tars, reads twice and hashes ~500 MB: 1-2 minutes on a busy 2-core machine
});
