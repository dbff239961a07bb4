import { CommandExitError, TimeoutError, type Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHarness, type Harness } from "./support/harness.ts";

let h: Harness;
let sbx: Sandbox;
beforeAll(async () => {
  h = await startHarness();
  sbx = await h.create({ envs: { FOO: "bar" } });
});
afterAll(() => h?.close());

describe("commands.run", () => {
  it("returns stdout, stderr and exit code 0", async () => {
    const r = await sbx.commands.run('echo "Hello, World!"; echo oops >&2');
    expect(r).toMatchObject({ exitCode: 0, stdout: "Hello, World!\n", stderr: "oops\n" });
  });

  it("keeps special characters and multi-line scripts intact through bash -l -c", async () => {
    const r = await sbx.commands.run("printf '%s\\n' \"a'b\" 'c\"d' '$HOME'\necho second line");
    expect(r.stdout).toBe("a'b\nc\"d\n$HOME\nsecond line\n");
  });

  it("rejects a non-zero exit with CommandExitError carrying the output", async () => {
    const err = await sbx.commands.run("echo out; echo err >&2; exit 3").catch((e) => e);
    expect(err).toBeInstanceOf(CommandExitError);
    expect(err).toMatchObject({ exitCode: 3, stdout: "out\n", stderr: "err\n", error: "exit status 3" });
  });

  it("runs as the default user in its home, or as the requested user and cwd", async () => {
    expect((await sbx.commands.run("whoami; pwd")).stdout).toBe("user\n/home/user\n");
    expect((await sbx.commands.run("whoami; pwd", { user: "root", cwd: "/tmp" })).stdout).toBe("root\n/tmp\n");
  });

  it("rejects an unknown user and a missing cwd as client errors", async () => {
    await expect(sbx.commands.run("true", { user: "nobody-here" })).rejects.toThrow(/unknown user/);
    await expect(sbx.commands.run("true", { cwd: "/does/not/exist" })).rejects.toThrow(/does not exist/);
  });

  it("passes sandbox env to every command and request env only to its own", async () => {
    expect((await sbx.commands.run("echo $FOO")).stdout).toBe("bar\n");
    expect((await sbx.commands.run("echo $FOO-$BAZ", { envs: { BAZ: "qux", FOO: "override" } })).stdout).toBe("override-qux\n");
    expect((await sbx.commands.run("echo -$BAZ-")).stdout).toBe("--\n");
  });

  it("streams output through callbacks as it is produced", async () => {
    const seen: string[] = [];
    await sbx.commands.run("for i in 1 2 3; do echo $i; sleep 0.05; done", { onStdout: (d) => void seen.push(d) });
    expect(seen.join("")).toBe("1\n2\n3\n");
    expect(seen.length).toBeGreaterThan(1);
  });

  it("kills the process when timeoutMs passes", async () => {
    const started = Date.now();
    const err = await sbx.commands.run("sleep 10", { timeoutMs: 1000 }).catch((e) => e);
    expect(err).toBeInstanceOf(TimeoutError);
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it("enforces the deadline server-side on a background process", async () => {
    const handle = await sbx.commands.run("sleep 30", { background: true, timeoutMs: 1500 });
    await expect(handle.wait()).rejects.toBeInstanceOf(TimeoutError);
    await new Promise((r) => setTimeout(r, 300));
    const r = await sbx.commands.run(`kill -0 ${handle.pid} 2>/dev/null; echo $?`);
    expect(r.stdout).toBe("1\n");
  });
});

describe("background commands", () => {
  it("kill returns true for a running process and false for an unknown pid", async () => {
    const handle = await sbx.commands.run("sleep 60", { background: true });
    expect(await sbx.commands.kill(handle.pid)).toBe(true);
    const err = await handle.wait().catch((e) => e);
    expect(err).toBeInstanceOf(CommandExitError);
    expect(err.error).toBe("signal: killed");
    await expect(sbx.commands.run(`kill -0 ${handle.pid}`)).rejects.toBeInstanceOf(CommandExitError);
    expect(await sbx.commands.kill(999_999)).toBe(false);
  });

  it("lists running processes with their command", async () => {
    const a = await sbx.commands.run("sleep 10", { background: true });
    const b = await sbx.commands.run("sleep 10", { background: true, envs: { TAGGED: "1" } });
    const list = await sbx.commands.list();
    const pids = list.map((p) => p.pid);
    expect(pids).toEqual(expect.arrayContaining([a.pid, b.pid]));
    expect(list.find((p) => p.pid === b.pid)).toMatchObject({ cmd: "/bin/bash", args: ["-l", "-c", "sleep 10"], envs: { TAGGED: "1" } });
    await a.kill();
    await b.kill();
    // A kill is a signal: the process leaves the list once its exit has been handled.
    await Promise.all([a.wait().catch(() => {}), b.wait().catch(() => {})]);
    expect((await sbx.commands.list()).map((p) => p.pid)).not.toContain(a.pid);
  });

  it("connect re-attaches to a running process and sees its later output", async () => {
    const handle = await sbx.commands.run("sleep 0.5; echo later", { background: true });
    await handle.disconnect();
    const again = await sbx.commands.connect(handle.pid);
    expect(again.pid).toBe(handle.pid);
    const r = await again.wait();
    expect(r.stdout).toBe("later\n");
    await expect(sbx.commands.connect(999_999)).rejects.toThrow();
  });

  it("sendStdin reaches the process, closeStdin ends it", async () => {
    const handle = await sbx.commands.run("cat", { background: true, stdin: true });
    await sbx.commands.sendStdin(handle.pid, "Hello, World!");
    await sbx.commands.sendStdin(handle.pid, "");
    await expect.poll(() => handle.stdout, { timeout: 2500 }).toBe("Hello, World!");
    await sbx.commands.closeStdin(handle.pid);
    const r = await handle.wait();
    expect(r).toMatchObject({ exitCode: 0, stdout: "Hello, World!" });
  });

  it("refuses stdin to a process started without it", async () => {
    const handle = await sbx.commands.run("sleep 5", { background: true });
    await expect(sbx.commands.sendStdin(handle.pid, "x")).rejects.toThrow(/stdin/);
    await handle.kill();
  });

  it("delivers large output completely and in order", async () => {
    const r = await sbx.commands.run("head -c 3000000 /dev/zero | tr '\\0' 'a'; echo");
    expect(r.stdout.length).toBe(3_000_001);
  });
});
