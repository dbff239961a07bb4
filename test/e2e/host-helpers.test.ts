// A hostile tenant's environment variables (perl, loader, shell, node and python start-up hooks
// aimed at payloads on the host) through every way the SDK sets them: `commands.run` envs,
// `Sandbox.create` envs and `pty.create` envs. None of them may run anything on the host (the
// host-side helper that enters the sandbox runs as root there), and the sandboxed command still
// gets every variable as its value. And what a sandbox reads of its pid 1 names no host path.
// Real e2b JS SDK against the whole local system.
import { type CommandResult, Sandbox } from "e2b";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, inject, it } from "vitest";
import { HOST_LOADER_SAW_IT, type HostileEnv, hostileEnv, parseEnv0 } from "../support/hostile-env.ts";
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
