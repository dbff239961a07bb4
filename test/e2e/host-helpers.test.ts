// A hostile tenant's environment variables (perl, loader, shell, node and python start-up hooks
// aimed at payloads on the host) through every way the SDK sets them: `commands.run` envs,
// `Sandbox.create` envs and `pty.create` envs. None of them may run anything on the host (the
// host-side helper that enters the sandbox runs as root there), and the sandboxed command still
// gets every variable as its value. And what a sandbox reads of its pid 1 names no host path.
// Real e2b JS SDK against the whole local system.
import { type CommandResult, Sandbox } from "e2b";
import { readFileSync } from "node:fs";
import { basename, join } from "node:path";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, inject, it } from "vitest";
import { HOST_LOADER_SAW_IT, type HostileEnv, hostileEnv, parseEnv0 } from "../support/hostile-env.ts";
import { INHERITED_FD } from "../../scripts/lib/system.ts";
import { e2b } from "./sdk.ts";

let sbx: Sandbox;
/** Payloads of their own for each test, so each proves its own entry point. */
let hostile: HostileEnv;

/** The payloads' markers first: a helper that ran one usually fails the command too. */
async function envOf(run: () => Promise<CommandResult>): Promise<CommandResult> {
  const r = await run().catch((err: unknown) => err as CommandResult);
  expect(hostile.ran()).toEqual([]);
  expect(r.stderr).not.toContain(HOST_LOADER_SAW_IT);
  expect(r.exitCode).toBe(0);
  return r;
}

beforeAll(async () => {
  sbx = await Sandbox.create(e2b());
});
afterAll(async () => {
  await sbx?.kill().catch(() => false);
});
beforeEach(() => {
  hostile = hostileEnv();
});
afterEach(() => hostile.dispose());

describe("tenant environment never reaches a host helper", () => {
  it("commands.run envs", async () => {
    const r = await envOf(() => sbx.commands.run("env -0", { envs: hostile.env }));
    expect(parseEnv0(r.stdout)).toMatchObject(hostile.env);
  });

  it("commands.run envs, as root", async () => {
    const r = await envOf(() => sbx.commands.run("env -0", { envs: hostile.env, user: "root" }));
    expect(parseEnv0(r.stdout)).toMatchObject(hostile.env);
  });

  it("Sandbox.create envs", async () => {
    const other = await Sandbox.create({ ...e2b(), envs: hostile.env });
    try {
      const r = await envOf(() => other.commands.run("env -0"));
      expect(parseEnv0(r.stdout)).toMatchObject(hostile.env);
    } finally {
      await other.kill();
    }
  });

  it("pty.create envs", async () => {
    let out = "";
    const dec = new TextDecoder();
    const pty = await sbx.pty.create({ cols: 80, rows: 24, envs: hostile.env, onData: (d) => void (out += dec.decode(d)) });
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode("env -0 > /tmp/pty-env; exit\n")).catch(() => {});
    await pty.wait().catch(() => {});
    expect(hostile.ran()).toEqual([]);
    expect(out).not.toContain(HOST_LOADER_SAW_IT);
    const seen = parseEnv0(await sbx.files.read("/tmp/pty-env"));
    expect(seen).toMatchObject(hostile.env);
    expect(seen.TERM).toBe("xterm-256color");
  });
});

describe("what a sandbox reads of its holder", () => {
  it("pid 1's command line and environment, and every process's, name no host path", async () => {
    const { dataDir } = inject("e2b");
    for (const user of ["user", "root"]) {
      const r = await sbx.commands.run("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; tr '\\0' ' ' < $p/environ; echo; done 2>/dev/null; true", { user });
      const pid1 = await sbx.commands.run("tr '\\0' ' ' < /proc/1/cmdline", { user });
      expect(pid1.stdout).toMatch(/\S/);
      for (const text of [r.stdout, pid1.stdout]) {
        expect(text).not.toContain(dataDir);
        expect(text).not.toContain("/sys/fs/cgroup");
        expect(text).not.toMatch(/--(ro-)?bind/);
      }
    }
  });
});

describe("what a sandbox holds of the host", () => {
  // The agent's own start-up closes what it inherited without close-on-exec: the global setup
  // hands it a host file so, as a careless supervisor would; before, the sandbox's pid 2 and
  // every command held it (and a harness's pipe), writable by the tenant.
  it("no process of a sandbox holds a descriptor the agent inherited", async () => {
    const inherited = basename(inject("agentInherited"));
    // The agent did inherit it (at INHERITED_FD) and closed it: else this test would prove nothing.
    const closed = readFileSync(join(inject("e2b").dataDir, "agent.log"), "utf8").split("\n").filter((l) => l.includes("closed descriptors inherited"));
    expect(closed.some((l) => (JSON.parse(l) as { fds?: number[] }).fds?.includes(INHERITED_FD))).toBe(true);
    const list = "for p in /proc/[0-9]*; do ls -l $p/fd/ 2>/dev/null; done; true";
    const asRoot = await sbx.commands.run(list, { user: "root" });
    // It read descriptors at all (pid 1's and the command's own /dev/null).
    expect(asRoot.stdout).toContain("/dev/null");
    let term = "";
    const dec = new TextDecoder();
    const pty = await sbx.pty.create({ cols: 200, rows: 24, onData: (d) => void (term += dec.decode(d)) });
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode(`${list}; exit\n`));
    await pty.wait().catch(() => undefined);
    // It listed its own terminal.
    expect(term).toContain("/dev/pts/");
    for (const text of [asRoot.stdout, term]) expect(text).not.toContain(inherited);
  });

  it("a terminal's master reaches no process of another sandbox: its commands, its terminals", async () => {
    // node-pty opens a terminal's master without close-on-exec: every process started after it
    // by the same spawner inherited it, other tenants' included, and could read that terminal
    // and type into it. Terminals now have a spawner of their own, and enter.pl closes what it
    // inherited, so a second terminal (that spawner's) holds nothing of the first either.
    const list = "for p in /proc/[0-9]*; do ls -l $p/fd/ 2>/dev/null; done; true";
    const dec = new TextDecoder();
    const first = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} });
    const other = await Sandbox.create(e2b());
    try {
      const asRoot = await other.commands.run(list, { user: "root" });
      expect(asRoot.stdout).toContain("/dev/null");
      let term = "";
      const second = await other.pty.create({ cols: 200, rows: 24, onData: (d) => void (term += dec.decode(d)) });
      await other.pty.sendInput(second.pid, new TextEncoder().encode(`${list}; exit\n`));
      await second.wait().catch(() => undefined);
      // It listed its own terminal.
      expect(term).toContain("/dev/pts/");
      for (const text of [asRoot.stdout, term]) expect(text).not.toContain("ptmx");
    } finally {
      await sbx.pty.kill(first.pid).catch(() => false);
      await other.kill().catch(() => false);
    }
  });
});
