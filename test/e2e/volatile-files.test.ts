// The files API creates in a local sandbox's /dev/shm and /run as a command there can: those were
// tmpfs bwrap mounted inside the sandbox's user namespace, which does not map the runtime's host
// uid, so the kernel refused every create with EOVERFLOW and the SDK saw a 500 (layout.ts
// volatileBinds). Real e2b JS SDK against the whole local system; the test runs on the host, so it
// also checks that links the tenant plants there lead to the sandbox's files, not the host's.
import { existsSync, readFileSync } from "node:fs";
import { FileType, NotEnoughSpaceError, Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { e2b, uniqueTag } from "./sdk.ts";

let sbx: Sandbox;
beforeAll(async () => {
  sbx = await Sandbox.create(e2b());
});
afterAll(async () => {
  await sbx?.kill().catch(() => false);
});

const asRoot = async (script: string) => {
  const r = await sbx.commands.run(script, { user: "root" });
  return r.stdout;
};
/** Owner, group and mode as `stat` inside shows them. */
const statOf = (path: string) => asRoot(`stat -c '%U %G %a %F' ${path}`);

describe("files in /dev/shm and /run", { timeout: 60_000 }, () => {
  for (const user of ["user", "root"] as const) {
    it(`write, makeDir and rename as ${user}: the owner and mode a command gets, the bytes read back`, async () => {
      // What a command of the same user makes in /dev/shm (umask 022), the reference.
      await sbx.commands.run(`echo hi > /dev/shm/cmd-${user} && mkdir /dev/shm/cmd-dir-${user}`, { user });
      const fileLike = await statOf(`/dev/shm/cmd-${user}`);
      const dirLike = await statOf(`/dev/shm/cmd-dir-${user}`);
      expect(fileLike).toBe(`${user} ${user} 644 regular file\n`);
      expect(dirLike).toBe(`${user} ${user} 755 directory\n`);

      for (const dir of ["/dev/shm", "/run"]) {
        const f = `${dir}/w-${user}`;
        await sbx.files.write(f, "hi\n", { user });
        expect(await sbx.files.read(f, { user })).toBe("hi\n");
        expect(await asRoot(`cat ${f}`)).toBe("hi\n");
        expect(await statOf(f)).toBe(fileLike);
        // Parents are made as the user's too.
        await sbx.files.write(`${dir}/p-${user}/q/r.txt`, "deep", { user });
        expect(await statOf(`${dir}/p-${user}/q`)).toBe(dirLike);

        expect(await sbx.files.makeDir(`${dir}/d-${user}`, { user })).toBe(true);
        expect(await statOf(`${dir}/d-${user}`)).toBe(dirLike);
        expect((await sbx.files.getInfo(`${dir}/d-${user}`, { user })).type).toBe(FileType.DIR);

        // Within the file system (rename(2)), and into it from the root's disk (a copy: EXDEV).
        const moved = await sbx.files.rename(f, `${dir}/m-${user}`, { user });
        expect(moved.path).toBe(`${dir}/m-${user}`);
        expect(await sbx.files.read(`${dir}/m-${user}`, { user })).toBe("hi\n");
        const home = user === "root" ? "/root" : "/home/user";
        await sbx.files.write(`${home}/tree/a/b.txt`, "from disk", { user });
        await sbx.files.rename(`${home}/tree`, `${dir}/tree-${user}`, { user });
        expect(await sbx.files.read(`${dir}/tree-${user}/a/b.txt`, { user })).toBe("from disk");
        expect(await statOf(`${dir}/tree-${user}/a/b.txt`)).toBe(fileLike);
        expect(await sbx.files.exists(`${home}/tree`, { user })).toBe(false);
        const names = (await sbx.files.list(dir, { user })).map((e) => e.name);
        expect(names).toEqual(expect.arrayContaining([`m-${user}`, `d-${user}`, `tree-${user}`]));
      }
      // And out of /dev/shm into /run: two binds of one tmpfs, so a copy as well.
      await sbx.files.write(`/dev/shm/x-${user}`, "across\n", { user });
      await sbx.files.rename(`/dev/shm/x-${user}`, `/run/x-${user}`, { user });
      expect(await asRoot(`cat /run/x-${user}; test -e /dev/shm/x-${user} || echo gone`)).toBe("across\ngone\n");
    });
  }

  it("a file the user may not read there is permission_denied, not a 500", async () => {
    await asRoot("echo secret > /run/secret && chmod 600 /run/secret && echo s > /dev/shm/secret && chmod 600 /dev/shm/secret");
    for (const path of ["/run/secret", "/dev/shm/secret"]) {
      await expect(sbx.files.read(path, { user: "user" }), path).rejects.toThrow(/permission denied/i);
    }
    expect(await sbx.files.read("/run/secret", { user: "root" })).toBe("secret\n");
  });

  it("links planted there lead to the sandbox's own files, never the host's", async () => {
    const tag = uniqueTag();
    await asRoot(`ln -s /etc/shadow /dev/shm/shadow && ln -s /etc /run/etc && ln -s /etc/probe-${tag} /dev/shm/probe`);
    // Read through a final link: the sandbox's /etc/shadow, whatever the host's says.
    const inside = await asRoot("cat /etc/shadow");
    expect(await sbx.files.read("/dev/shm/shadow", { user: "root" })).toBe(inside);
    expect(inside).not.toBe(readFileSync("/etc/shadow", "utf8"));
    // A create through a final link and through a linked directory: the sandbox's /etc.
    await sbx.files.write("/dev/shm/probe", "a", { user: "root" });
    await sbx.files.write(`/run/etc/probe2-${tag}`, "b", { user: "root" });
    expect(await asRoot(`cat /etc/probe-${tag} /etc/probe2-${tag}`)).toBe("ab");
    expect(existsSync(`/etc/probe-${tag}`)).toBe(false);
    expect(existsSync(`/etc/probe2-${tag}`)).toBe(false);
  });

  it("a directory swapped for a link to /etc while files are written there: never the host's /etc", async () => {
    const tag = uniqueTag();
    const swapper = await sbx.commands.run("cd /dev/shm && while :; do mkdir -p sw; rmdir sw 2>/dev/null; ln -sfn /etc sw; rm -f sw; done", { user: "root", background: true });
    try {
      for (let i = 0; i < 40; i++) await sbx.files.write(`/dev/shm/sw/race-${tag}`, "r", { user: "root" }).catch(() => {});
    } finally {
      await sbx.commands.kill(swapper.pid);
    }
    expect(existsSync(`/etc/race-${tag}`)).toBe(false);
  });

  it("hostile names there are a 4xx, not a 500: NUL, 4 KiB, `..` stays inside", async () => {
    for (const path of ["/dev/shm/a\u0000b", `/dev/shm/${"n".repeat(4096)}`, `/run/${"n".repeat(300)}`]) {
      const err = await sbx.files.write(path, "x", { user: "root" }).catch((e: unknown) => e as Error);
      expect((err as Error).message, path.slice(0, 20)).toMatch(/^4\d\d: /);
    }
    const tag = uniqueTag();
    await sbx.files.write(`/dev/shm/../../run/../../../../etc/dots-${tag}`, "d", { user: "root" });
    expect(await asRoot(`cat /etc/dots-${tag}`)).toBe("d");
    expect(existsSync(`/etc/dots-${tag}`)).toBe(false);
  });

  it("/dev itself (bwrap's own, in the sandbox's namespace): a create is refused clearly, not a 500", async () => {
    const err = await sbx.files.write("/dev/made-by-files", "x", { user: "root" }).catch((e: unknown) => e as Error);
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).message).toMatch(/^403: .*create it with a command/);
    const dirErr = await sbx.files.makeDir("/dev/dir-by-files", { user: "root" }).catch((e: unknown) => e as Error);
    expect((dirErr as Error).message).toMatch(/create it with a command/);
  });
});

describe("the size of /dev/shm and /run", { timeout: 180_000 }, () => {
  // The files API writes there as the shared runtime, whose pages no sandbox's memory cgroup is
  // charged for: only the tmpfs's own size bounds them (userns.ts volatileBounds, half the
  // sandbox's memory). Without it, 1 GiB went into a 512 MB sandbox, up to half the host's memory.
  it("a files.write past half the sandbox's memory is 507 not enough space (NotEnoughSpaceError); freed, it takes writes again", async () => {
    const s = await Sandbox.create(e2b());
    try {
      const root = { user: "root" as const };
      // 512 MB, the default: 256 MiB for /dev/shm and /run together, as a command sees too.
      const sizes = (await s.commands.run("df -m --output=size /dev/shm /run | tail -2", root)).stdout;
      expect(sizes.split("\n").map((l) => l.trim())).toEqual(["256", "256", ""]);
      const chunk = new Blob([Buffer.alloc(64 * 2 ** 20, 0x61)]);
      let refused: unknown;
      let written = 0;
      for (let i = 0; i < 6 && !refused; i++) {
        await s.files.write(`/dev/shm/big${i}`, chunk, root).then(() => (written += 64), (e: unknown) => (refused = e));
      }
      expect(refused).toBeInstanceOf(NotEnoughSpaceError);
      expect((refused as Error).message).toBe("not enough disk space available");
      expect(written).toBeLessThanOrEqual(256);
      expect(Number((await s.commands.run("du -sm /dev/shm | cut -f1", root)).stdout)).toBeLessThanOrEqual(256);
      // Freed, it takes writes again; the sandbox is still usable.
      await s.commands.run("rm -f /dev/shm/big*", root);
      await s.files.write("/dev/shm/after", "ok", root);
      expect(await s.files.read("/dev/shm/after", root)).toBe("ok");
    } finally {
      await s.kill().catch(() => false);
    }
  });
});

describe("what /dev/shm and /run keep, as before", { timeout: 90_000 }, () => {
  it("a Freeze pause keeps their files; a Stop pause (a reboot) empties them and they are writable after", async () => {
    const s = await Sandbox.create(e2b());
    try {
      await s.commands.run("echo shm > /dev/shm/kept && echo run > /run/kept", { user: "root" });
      expect(await s.pause()).toBe(true);
      const thawed = await Sandbox.connect(s.sandboxId, e2b());
      expect((await thawed.commands.run("cat /dev/shm/kept /run/kept", { user: "root" })).stdout).toBe("shm\nrun\n");
      expect(await thawed.pause({ keepMemory: false })).toBe(true);
      const rebooted = await Sandbox.connect(s.sandboxId, e2b());
      const after = await rebooted.commands.run("ls -A /dev/shm; test -e /run/kept || echo gone; stat -c '%a %U' /dev/shm /run; echo ok > /dev/shm/new && cat /dev/shm/new", { user: "user" });
      expect(after.stdout).toBe("gone\n1777 root\n755 root\nok\n");
    } finally {
      await s.kill().catch(() => false);
    }
  });
});
