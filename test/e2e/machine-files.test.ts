// The files API sees a local sandbox's machine as envd sees a VM's, and a killed process is gone
// when kill returns. Real e2b JS SDK against the whole local system.
import { FileType, InvalidArgumentError, NotFoundError, Sandbox, SandboxError } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { e2b } from "./sdk.ts";

let sbx: Sandbox;
beforeAll(async () => {
  sbx = await Sandbox.create(e2b());
});
afterAll(async () => {
  await sbx?.kill().catch(() => false);
});

describe("a killed process leaves no zombie", () => {
  it("commands.kill: kill -0 and ps inside no longer see the pid", async () => {
    for (let i = 0; i < 3; i++) {
      const h = await sbx.commands.run("sleep 600", { background: true });
      expect(await sbx.commands.kill(h.pid)).toBe(true);
      const r = await sbx.commands.run(`kill -0 ${h.pid} 2>/dev/null && echo present; ps -e -o pid= | tr -d ' ' | grep -qx ${h.pid} && echo listed; true`);
      expect(r.stdout).toBe("");
    }
  });

  it("pty.kill: the shell is gone at once", async () => {
    const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} });
    expect(await sbx.pty.kill(pty.pid)).toBe(true);
    const r = await sbx.commands.run(`kill -0 ${pty.pid} 2>/dev/null && echo present; ps -e -o pid= | tr -d ' ' | grep -qx ${pty.pid} && echo listed; true`);
    expect(r.stdout).toBe("");
  });
});

describe("files anywhere the user may reach", () => {
  it("reads /proc/self/status, /etc/passwd and lists /", async () => {
    expect(await sbx.files.read("/proc/self/status")).toMatch(/^Name:/m);
    expect(await sbx.files.read("/etc/passwd")).toMatch(/^user:x:1000:1000:/m);
    const names = (await sbx.files.list("/")).map((e) => e.name);
    expect(names).toEqual(expect.arrayContaining(["etc", "home", "proc", "tmp", "usr"]));
    const usr = (await sbx.files.list("/usr")).find((e) => e.name === "bin");
    expect(usr?.type).toBe(FileType.DIR);
  });

  it("a file the user may not read is permission_denied; a missing one not_found", async () => {
    await sbx.commands.run("echo secret > /root/secret && chmod 600 /root/secret", { user: "root" });
    await expect(sbx.files.read("/root/secret", { user: "user" })).rejects.toThrow(/permission denied/i);
    await expect(sbx.files.read("/root/secret", { user: "root" })).resolves.toBe("secret\n");
    await expect(sbx.files.read("/etc/nope")).rejects.toBeInstanceOf(NotFoundError);
    await expect(sbx.files.list("/etc/nope")).rejects.toBeInstanceOf(NotFoundError);
  });

  it("write creates parent directories, owned by the user with names from the sandbox", async () => {
    await sbx.files.write("/home/user/a/b/c.txt", "hi");
    expect(await sbx.files.read("/home/user/a/b/c.txt")).toBe("hi");
    const info = await sbx.files.getInfo("/home/user/a/b");
    expect(info).toMatchObject({ owner: "user", group: "user", type: FileType.DIR });
    const listed = (await sbx.files.list("/home/user/a/b"))[0];
    expect(listed).toMatchObject({ name: "c.txt", owner: "user", group: "user" });
  });

  // The local driver's files API is the host's root, and the kernel's files answer to their opener's
  // rights (core_pattern, sysrq-trigger, kallsyms' addresses, keys): it reads the sandbox's own
  // processes' files and nothing else there, and writes none, wherever root inside binds them.
  it("the kernel's files: its own /proc/<pid> files read; every other one, and any write, refused, by file system not path", async () => {
    expect(await sbx.files.read("/proc/1/status", { user: "root" })).toMatch(/^Name:/m);
    expect((await sbx.files.list("/proc")).some((e) => e.name === "1")).toBe(true);
    for (const path of ["/proc/kallsyms", "/proc/keys", "/proc/sys/kernel/hostname"]) {
      const err = await sbx.files.read(path, { user: "root" }).catch((e: unknown) => e);
      expect(err, path).toBeInstanceOf(SandboxError);
      expect((err as Error).message, path).toMatch(/kernel's file systems/);
    }
    const bound = await sbx.commands.run("mkdir -p /run/k && mount --bind /proc/sys/kernel /run/k && echo bound", { user: "root" });
    expect(bound.stdout).toBe("bound\n");
    const err = await sbx.files.read("/run/k/hostname", { user: "root" }).catch((e: unknown) => e);
    expect((err as Error).message).toMatch(/kernel's file systems/);
    const w = await sbx.files.write("/proc/1/comm", "x", { user: "root" }).catch((e: unknown) => e);
    expect((w as Error).message).toMatch(/does not write it/);
    await sbx.commands.run("umount /run/k", { user: "root" });
  });

  it("a refused large upload still answers its error, not a broken pipe", async () => {
    const big = new Uint8Array(64 * 1024 * 1024);
    const err = await sbx.files.write("/proc/sys/big", big.buffer).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SandboxError);
    expect((err as Error).message).toMatch(/kernel's file systems/);
  });

  it("metadata is user.e2b.* xattrs, visible both ways", async () => {
    await sbx.files.write("/home/user/meta.txt", "m", { metadata: { color: "blue" } });
    const seen = await sbx.commands.run("getfattr --only-values -n user.e2b.color /home/user/meta.txt || python3 -c \"import os;print(os.getxattr('/home/user/meta.txt','user.e2b.color').decode(),end='')\"");
    expect(seen.stdout).toBe("blue");
    await sbx.commands.run("python3 -c \"import os;os.setxattr('/home/user/meta.txt','user.e2b.size',b'XL')\"");
    const info = await sbx.files.getInfo("/home/user/meta.txt");
    expect(info.metadata).toEqual({ color: "blue", size: "XL" });
  });
});

void InvalidArgumentError;
