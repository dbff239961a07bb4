// The spawner process that forks on the agent's behalf: pipes handed back intact, terminals
// relayed, and its death noticed (clear error, restart, nothing left running).
import { spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { dirname } from "node:path";
import type { Readable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, describe, expect, it } from "vitest";
import { runHelper } from "../../../../controllers/drivers/local/disk.ts";
import { syscallNumbers } from "../../../../controllers/drivers/local/host-helpers.ts";
import { ENTER_SCRIPT } from "../../../../controllers/drivers/local/local-view.ts";
import { Spawner } from "../../../../controllers/drivers/local/spawner.ts";
import { PID_FILE_ENV, PID_FILE_WANTED } from "../../../../controllers/drivers/local/spawner-sandbox-pid.ts";
import { SANDBOX_ENV_FILE, type LaunchedExit } from "../../../../controllers/runtime/process/launcher.ts";

const spawner = new Spawner();
afterAll(() => spawner.dispose());

const { setns, prctl } = syscallNumbers();
/** A command run through enter.pl at `process` level (no namespaces), as the local view builds it;
 * `holder` is the process whose namespaces it would join, as `<pid>:<start time>` ("0": none). */
const entered = (cmd: string[], holder = "0") => ({
  file: "/usr/bin/perl",
  args: [ENTER_SCRIPT, SANDBOX_ENV_FILE, holder, "0", "0", "/", "-", String(setns), String(prctl), "-", "-", "--", ...cmd],
  cwd: "/",
  env: { PATH: "/usr/bin:/bin", [PID_FILE_ENV]: PID_FILE_WANTED },
  sandboxEnv: { PATH: "/usr/bin:/bin" },
});

function text(s: Readable): Promise<string> {
  return new Promise((resolve) => {
    let t = "";
    s.on("data", (d) => (t += String(d)));
    s.once("close", () => resolve(t));
  });
}

const exitOf = (p: { onExit(fn: (e: LaunchedExit) => void): void }) => new Promise<LaunchedExit>((r) => p.onExit(r));

/** Running, not a zombie (this machine's pid 1 does not reap orphans). */
function running(pid: number): boolean {
  try {
    return !/^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, "utf8"));
  } catch {
    return false;
  }
}

async function pollUntil(ok: () => boolean, ms = 3000): Promise<void> {
  for (const deadline = Date.now() + ms; !ok() && Date.now() < deadline; ) await sleep(10);
}

async function gone(pid: number, ms = 3000): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (running(pid)) {
    if (Date.now() > deadline) return false;
    await sleep(10);
  }
  return true;
}

describe("spawner", () => {
  it("hands back stdout and stderr separately with nothing lost, even from a command that writes at once and exits", async () => {
    for (let i = 0; i < 20; i++) {
      const p = await spawner.spawnPipes({ file: "/bin/sh", args: ["-c", `echo out${i}; echo err${i} >&2; exit 3`], cwd: "/", env: {} }, false);
      const [out, err, exit] = await Promise.all([text(p.stdout), text(p.stderr), exitOf(p)]);
      expect({ out, err, exit }).toEqual({ out: `out${i}\n`, err: `err${i}\n`, exit: { code: 3, signal: null } });
      expect(p.stdin).toBeUndefined();
    }
  });

  it("a burst bigger than the pool of connections falls back to passing pipes, with nothing lost either way", async () => {
    const runs = Array.from({ length: 60 }, async (_, i) => {
      const p = await spawner.spawnPipes({ file: "/bin/sh", args: ["-c", `echo out${i}; echo err${i} >&2`], cwd: "/", env: {} }, i % 2 === 0);
      p.stdin?.end();
      const [out, err, exit] = await Promise.all([text(p.stdout), text(p.stderr), exitOf(p)]);
      return { out, err, exit };
    });
    const results = await Promise.all(runs);
    results.forEach((r, i) => expect(r).toEqual({ out: `out${i}\n`, err: `err${i}\n`, exit: { code: 0, signal: null } }));
  });

  it("stdin reaches the command and closing it gives end of file", async () => {
    const p = await spawner.spawnPipes({ file: "/usr/bin/wc", args: ["-c"], cwd: "/", env: {} }, true);
    const out = text(p.stdout);
    p.stdin!.write("x".repeat(100_000));
    p.stdin!.end();
    expect((await out).trim()).toBe("100000");
    expect(await exitOf(p)).toEqual({ code: 0, signal: null });
  });

  it("large output arrives complete and in order", async () => {
    const p = await spawner.spawnPipes({ file: "/usr/bin/seq", args: ["1", "200000"], cwd: "/", env: {} }, false);
    const out = await text(p.stdout);
    expect(out.split("\n").length).toBe(200_001);
    expect(out.endsWith("199999\n200000\n")).toBe(true);
  });

  it("reports signals as signals, and the pid is the host process the caller can signal", async () => {
    const p = await spawner.spawnPipes({ file: "/bin/sleep", args: ["30"], cwd: "/", env: {} }, false);
    process.kill(p.pid, "SIGTERM");
    expect(await exitOf(p)).toEqual({ code: null, signal: "SIGTERM" });
  });

  it("a terminal: output, input and resize go through", async () => {
    const t = await spawner.spawnPty({ file: "/bin/bash", args: ["-c", "stty size; read x; echo got:$x"], cwd: "/", env: { TERM: "xterm" } }, { cols: 100, rows: 30 });
    let out = "";
    t.onData((d) => (out += String(d)));
    while (!out.includes("30 100")) await sleep(10);
    t.resize(120, 40);
    t.write(Buffer.from("hello\n"));
    expect(await exitOf(t)).toEqual({ code: 0, signal: null });
    expect(out).toContain("got:hello");
  });

  it("a terminal's master is held by nothing started while it is open: holders and commands of any sandbox", async () => {
    // node-pty opens the master without close-on-exec: in the process that starts holders and
    // commands, every later holder's `sleep` and every command (another tenant's) inherited it.
    const t = await spawner.spawnPty({ file: "/bin/bash", args: ["-c", "echo up; read x"], cwd: "/", env: { TERM: "xterm" } }, { cols: 80, rows: 24 });
    let out = "";
    t.onData((d) => (out += String(d)));
    while (!out.includes("up")) await sleep(10);
    try {
      const holderLike = await spawner.spawn({ file: "/bin/ls", args: ["-l", "/proc/self/fd/"], cwd: "/", env: {} }, { detached: true, stdio: ["ignore", "pipe", "ignore"] });
      const cmd = await spawner.spawnPipes({ file: "/bin/ls", args: ["-l", "/proc/self/fd/"], cwd: "/", env: {} }, false);
      for (const listed of await Promise.all([text(holderLike.pipes.get(1) as Readable), text(cmd.stdout)])) {
        expect(listed).toContain("/proc/");
        expect(listed).not.toContain("ptmx");
      }
    } finally {
      t.write(Buffer.from("\n"));
      await exitOf(t);
    }
  });

  it("a command that cannot start is a clear error, and the spawner keeps working", async () => {
    await expect(spawner.spawnPipes({ file: "/nonexistent/binary", args: [], cwd: "/", env: {} }, false)).rejects.toThrow(/ENOENT/);
    const p = await spawner.spawnPipes({ file: "/bin/echo", args: ["still here"], cwd: "/", env: {} }, false);
    expect(await text(p.stdout)).toBe("still here\n");
  });

  it("an empty output's end waits for its consumer, also when the pool of connections is used up", async () => {
    // More at once than the pool holds: the rest come back as descriptors the spawner passes.
    const s = new Spawner();
    try {
      const started = await Promise.all(Array.from({ length: 40 }, () => s.spawnPipes({ file: "/bin/true", args: [], cwd: "/", env: {} }, false)));
      await Promise.all(started.map((p) => exitOf(p)));
      // A consumer that listens only now (the runtime, once the start is known) still sees both
      // ends: a pipe that had closed before would never report its 'close'.
      expect(started.map((p) => [p.stdout.readableEnded || p.stdout.destroyed, p.stderr.readableEnded || p.stderr.destroyed]).filter(([a, b]) => a || b)).toEqual([]);
      expect(await Promise.all(started.flatMap((p) => [text(p.stdout), text(p.stderr)]))).toEqual(Array(80).fill(""));
    } finally {
      await s.dispose();
    }
  });

  it("a command through enter.pl reports the pid of the command it became, also when it is done at once, a few at a time", async () => {
    for (let round = 0; round < 10; round++) {
      const started = await Promise.all(Array.from({ length: 4 }, () => spawner.spawnPipes(entered(["/bin/sh", "-c", "echo $$"]), false)));
      const outs = await Promise.all(started.map(async (p) => (await Promise.all([text(p.stdout), exitOf(p)]))[0]));
      expect(started.map((p) => p.sandboxPid)).toEqual(outs.map(Number));
    }
    const long = await spawner.spawnPipes(entered(["/bin/sleep", "300"]), false);
    try {
      expect(readFileSync(`/proc/${long.sandboxPid}/cmdline`, "utf8")).toBe("/bin/sleep\0" + "300\0");
    } finally {
      process.kill(long.sandboxPid!, "SIGKILL");
      await exitOf(long);
    }
    // Nothing of the reports is left.
    expect(readdirSync(dirname(spawner.scratchFile("probe"))).filter((f) => f.startsWith("pid"))).toEqual([]);
  });

  it("a wrapper that ends without a report (it never entered the sandbox) fails the start with a clear error, not the host pid", async () => {
    // No such holder: enter.pl fails before it forks.
    await expect(spawner.spawnPipes(entered(["/bin/true"], "999999999:1"), false)).rejects.toThrow(/could not enter the sandbox \(its wrapper exited with code 127\)/);
  });

  it("a helper's failure carries what it wrote to stderr, and no file of it is left either way", async () => {
    const s = new Spawner();
    try {
      await runHelper(s, ["/bin/sh", "-c", "exit 0"]);
      await expect(runHelper(s, ["/bin/sh", "-c", "echo 'no such device' >&2; exit 3"])).rejects.toThrow(/^sh: no such device$/);
      await expect(runHelper(s, ["/bin/sh", "-c", "exit 4"])).rejects.toThrow(/^sh: exit 4$/);
      expect(readdirSync(dirname(s.scratchFile("probe"))).filter((f) => f.startsWith("helper"))).toEqual([]);
    } finally {
      await s.dispose();
    }
  });

  it("its death ends what it started with a clear error, leaves nothing running, and the next spawn starts a new one", async () => {
    const s = new Spawner();
    const a = await s.spawnPipes(entered(["/bin/sleep", "300"]), false);
    const first = s.pid!;
    // The command inside enter.pl: a child of the host-side process.
    await sleep(100);
    const inner = Number(readFileSync(`/proc/${a.pid}/task/${a.pid}/children`, "utf8").trim());
    expect(running(inner)).toBe(true);
    process.kill(first, "SIGKILL");
    const exit = await exitOf(a);
    expect(exit.error).toMatch(/the process spawner exited \(SIGKILL\); the process was killed/);
    expect(await gone(a.pid)).toBe(true);
    expect(await gone(inner)).toBe(true);

    const b = await s.spawnPipes({ file: "/bin/echo", args: ["again"], cwd: "/", env: {} }, false);
    expect(await text(b.stdout)).toBe("again\n");
    expect(s.pid).not.toBe(first);
    await s.dispose();
    expect(await gone(first)).toBe(true);
  });

  it("a forgotten detached process (a holder): its exit is still heard; its spawner's death says nobody can tell, and it runs on", async () => {
    const own = new Spawner();
    try {
      const detached = { file: "/bin/sleep", args: ["300"], cwd: "/", env: {} };
      const a = await own.spawn(detached, { detached: true, stdio: ["ignore", "ignore", "ignore"] });
      const heardA: boolean[] = [];
      a.forget((heard) => heardA.push(heard));
      process.kill(a.pid, "SIGKILL");
      await gone(a.pid);
      await pollUntil(() => heardA.length > 0);
      expect(heardA).toEqual([true]);

      const b = await own.spawn(detached, { detached: true, stdio: ["ignore", "ignore", "ignore"] });
      const heardB: boolean[] = [];
      b.forget((heard) => heardB.push(heard));
      process.kill(own.pid!, "SIGKILL");
      await pollUntil(() => heardB.length > 0);
      expect(heardB).toEqual([false]);
      expect(running(b.pid)).toBe(true);
      process.kill(b.pid, "SIGKILL");
    } finally {
      await own.dispose();
    }
  });

  it("exits with the agent (kill -9 with requests in flight), taking the agent's commands with it but not detached holders' sessions", async () => {
    // A stand-in agent: starts a spawner, runs one command through enter.pl, reports the pids.
    const script = `
      import { Spawner } from ${JSON.stringify(new URL("../../../../controllers/drivers/local/spawner.ts", import.meta.url).pathname)};
      const s = new Spawner();
      const cmd = await s.spawnPipes(${JSON.stringify(entered(["/bin/sleep", "300"]))}, false);
      const holder = await s.spawn({ file: "/bin/sleep", args: ["300"], cwd: "/", env: {} }, { detached: true, stdio: ["ignore", "ignore", "ignore"] });
      holder.forget();
      console.log(JSON.stringify({ spawner: s.pid, cmd: cmd.pid, holder: holder.pid }));
      // Keep big requests in flight, so the kill is likely to land in the middle of one.
      const big = { file: "/bin/true", args: [], cwd: "/", env: { BIG: "x".repeat(20_000_000) } };
      setInterval(() => void s.spawnPipes(big, false).catch(() => {}), 20);
    `;
    const agent = spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "inherit"] });
    const line = await new Promise<string>((resolve) => agent.stdout!.once("data", (d) => resolve(String(d))));
    const pids = JSON.parse(line) as { spawner: number; cmd: number; holder: number };
    expect(running(pids.spawner) && running(pids.cmd) && running(pids.holder)).toBe(true);
    await sleep(300);
    agent.kill("SIGKILL");
    expect(await gone(pids.spawner)).toBe(true);
    expect(await gone(pids.cmd)).toBe(true);
    expect(running(pids.holder)).toBe(true);
    process.kill(pids.holder, "SIGKILL");
  });

  it("a script whose last step is dispose ends normally once the spawner is gone, not cut short with its spawner running", async () => {
    // A CLI's shape (a bench, a one-off tool): one command, then dispose, then nothing left to do.
    const script = `
      import { Spawner } from ${JSON.stringify(new URL("../../../../controllers/drivers/local/spawner.ts", import.meta.url).pathname)};
      const s = new Spawner();
      const p = await s.spawn({ file: "/bin/true", args: [], cwd: "/", env: {} }, { detached: false, stdio: ["ignore", "ignore", "ignore"] });
      await new Promise((ok) => p.onExit(ok));
      console.log(String(s.pid));
      await s.dispose();
      console.log("disposed");
    `;
    const tool = spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "pipe"] });
    const [out, code] = await Promise.all([text(tool.stdout!), new Promise<number | null>((r) => tool.once("exit", (c) => r(c)))]);
    const [pid, last] = out.trim().split("\n");
    // Node ends a script whose last await cannot settle with 13: dispose must keep it alive.
    expect({ code, last }).toEqual({ code: 0, last: "disposed" });
    expect(await gone(Number(pid))).toBe(true);
  });
});
