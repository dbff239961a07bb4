// Command pids are the pids the sandbox sees, as on E2B where envd runs inside the VM: user code
// that passes a handle's pid to `kill`, `kill -0` or /proc inside the sandbox must reach that
// process, and every pid-taking call (kill, sendStdin, connect, list, PTY input and resize)
// takes the same number. Local sandboxes have their own pid namespace, so the host's pid of the
// process differs from it. Real e2b JS SDK against the whole local system.
import { CommandExitError, type CommandHandle, Sandbox } from "e2b";
import { readlinkSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { e2b } from "./sdk.ts";

let sbx: Sandbox;
beforeAll(async () => {
  sbx = await Sandbox.create(e2b());
});
afterAll(async () => {
  await sbx?.kill().catch(() => false);
});

/** Starts `script` in the background and returns its handle and the first line it printed. */
async function startPrinting(script: string, opts: { stdin?: boolean } = {}): Promise<{ h: CommandHandle; line: string }> {
  let out = "";
  let seen: () => void = () => {};
  const printed = new Promise<void>((r) => (seen = r));
  const h = await sbx.commands.run(script, {
    background: true,
    stdin: opts.stdin,
    onStdout: (d) => {
      out += d;
      if (out.includes("\n")) seen();
    },
  });
  await printed;
  return { h, line: out.split("\n")[0]! };
}

describe("command pids as the sandbox sees them", () => {
  it("runs in a pid namespace other than the host's (what makes the two pids differ)", async () => {
    const inside = await sbx.commands.run("readlink /proc/self/ns/pid");
    expect(inside.stdout.trim()).toMatch(/^pid:\[\d+\]$/);
    expect(inside.stdout.trim()).not.toBe(readlinkSync("/proc/self/ns/pid"));
  });

  it("a background command's pid is its $$, and /proc/<pid> inside is that process", async () => {
    const { h, line } = await startPrinting("echo $$; exec sleep 60");
    expect(Number(line)).toBe(h.pid);
    const proc = await sbx.commands.run(`tr '\\0' ' ' < /proc/${h.pid}/cmdline`);
    expect(proc.stdout.trim()).toBe("sleep 60");
    expect((await sbx.commands.run(`kill -0 ${h.pid} && echo alive`)).stdout).toBe("alive\n");
    await sbx.commands.kill(h.pid);
  });

  it("short commands started many at once each report their own $$, never the host's pid", async () => {
    // A command done within a millisecond or two was often gone before the agent looked for it
    // (13–26 % of them four at a time): it then reported the host pid of its wrapper.
    for (let round = 0; round < 4; round++) {
      const started = await Promise.all(Array.from({ length: 16 }, () => sbx.commands.run("echo $$", { background: true })));
      const outs = await Promise.all(started.map(async (h) => (await h.wait()).stdout.trim()));
      expect(started.map((h) => h.pid)).toEqual(outs.map(Number));
    }
  });

  it("`kill <pid>` from another command ends the first one", async () => {
    const { h } = await startPrinting("echo up; exec sleep 60");
    await sbx.commands.run(`kill ${h.pid}`);
    const err = await h.wait().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CommandExitError);
    expect(err).toMatchObject({ error: "signal: terminated" });
    expect((await sbx.commands.list()).map((p) => p.pid)).not.toContain(h.pid);
  });

  it("list, connect, sendStdin, closeStdin and kill take the pid the process sees", async () => {
    const { h, line } = await startPrinting("echo $$; read a; echo got:$a; exec sleep 60", { stdin: true });
    const pid = Number(line);
    expect(h.pid).toBe(pid);

    const listed = (await sbx.commands.list()).find((p) => p.pid === pid);
    expect(listed?.args.join(" ")).toContain("read a");

    let again = "";
    const other = await sbx.commands.connect(pid, { onStdout: (d) => void (again += d) });
    expect(other.pid).toBe(pid);
    await sbx.commands.sendStdin(pid, "hello\n");
    await expect.poll(() => again, { timeout: 10_000 }).toBe("got:hello\n");

    expect(await sbx.commands.kill(pid)).toBe(true);
    const err = await h.wait().catch((e: unknown) => e);
    expect(err).toMatchObject({ error: "signal: killed" });
    expect(await sbx.commands.kill(pid)).toBe(false);
  });

  it("closeStdin takes the same pid", async () => {
    const { h, line } = await startPrinting("echo $$; cat; echo eof", { stdin: true });
    expect(h.pid).toBe(Number(line));
    await sbx.commands.closeStdin(h.pid);
    const r = await h.wait();
    expect(r.stdout).toBe(`${line}\neof\n`);
  });

  it("a terminal's pid is its shell's $$; input and resize reach it by that pid", async () => {
    let out = "";
    const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => void (out += new TextDecoder().decode(d)) });
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode("echo pid=$$\n"));
    await expect.poll(() => /pid=(\d+)\r?\n/.exec(out)?.[1], { timeout: 10_000 }).toBe(String(pty.pid));
    await sbx.pty.resize(pty.pid, { cols: 101, rows: 24 });
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode("tput cols\n"));
    await expect.poll(() => out, { timeout: 10_000 }).toMatch(/\b101\r?\n/);
    expect(await sbx.pty.kill(pty.pid)).toBe(true);
  });
});
