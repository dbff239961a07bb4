// An agent stopped with `--on-exit destroy` (how the tests and a throwaway `npm start` run it)
// destroys every sandbox before it exits: nothing of them stays mounted or running on the host.
// CI run 11-2: with the port relay idle, the stop's last relay command (a destroy's `unveth`) left
// the agent with no work the event loop counted, so it exited silently mid-stop, and every e2e
// system's teardown then failed on a still-mounted sandbox disk.
// Every agent also makes a cgroup subtree of its own (`kruise-<id>`, in the v2 tree and each v1
// limit hierarchy): it goes when the agent stops holding no sandbox, and stays while one lives.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { startSystem, type System } from "../../scripts/lib/system.ts";

let sys: System | undefined;
const dataDir = mkdtempSync(join(tmpdir(), "sbx-agent-stop-"));
const keepDir = mkdtempSync(join(tmpdir(), "sbx-agent-keep-"));
const stopDir = mkdtempSync(join(tmpdir(), "sbx-agent-stopped-"));
// A case that failed midway has not stopped its system: the next case would start its own beside
// it, and the first (sqld, workerd, maybe the agent) would outlive the run.
afterEach(async () => {
  const running = sys;
  sys = undefined;
  await running?.stop();
});
afterAll(() => {
  rmSync(dataDir, { recursive: true, force: true });
  rmSync(stopDir, { recursive: true, force: true });
  // An agent that keeps its sandboxes keeps its spare disks mounted for the next one: none comes.
  // One still busy (a sandbox the keep case could not end) stays, and so does the directory: a
  // recursive removal would reach through the mount into that sandbox's files.
  const mounted = readFileSync("/proc/self/mountinfo", "utf8").split("\n").map((l) => l.split(" ")[4] ?? "");
  const busy: string[] = [];
  for (const at of mounted.filter((m) => m.startsWith(`${keepDir}/`)).reverse()) {
    try {
      execFileSync("umount", ["-d", at], { stdio: "pipe" });
    } catch {
      busy.push(at);
    }
  }
  if (busy.length === 0) rmSync(keepDir, { recursive: true, force: true });
  else console.warn(`agent-stop: still mounted, left for cleanup by hand: ${busy.join(", ")}`);
});

/** The cgroup directories of the agent of a system's data dir, in every hierarchy (a v1 one may
 * nest it under the agent's own cgroup, a few levels down). */
function agentCgroups(systemDir: string): string[] {
  const name = `kruise-${readFileSync(join(systemDir, "agent", "agent-id"), "utf8").trim().slice(-12)}`;
  const found: string[] = [];
  const walk = (dir: string, depth: number) => {
    let entries: string[];
    try {
      entries = readdirSync(dir, { withFileTypes: true }).filter((d) => d.isDirectory()).map((d) => d.name);
    } catch {
      return;
    }
    for (const e of entries) {
      if (e === name) found.push(join(dir, e));
      else if (depth > 0) walk(join(dir, e), depth - 1);
    }
  };
  walk("/sys/fs/cgroup", 3);
  return found;
}

describe("an agent's stop", () => {
  it("destroys its sandboxes, one with internet access included: no mount or process of theirs is left", async () => {
    sys = await startSystem({ dataDir, onExit: "destroy", baseReplicas: 1 });
    const sbx = await Sandbox.create({ apiUrl: sys.apiUrl, apiKey: sys.apiKey, sandboxUrl: sys.apiUrl, requestTimeoutMs: 60_000 });
    expect((await sbx.commands.run("echo up")).stdout).toBe("up\n");
    const mounts = () => readFileSync("/proc/self/mountinfo", "utf8").split("\n").filter((l) => l.includes(dataDir));
    expect(mounts().length).toBeGreaterThan(0);
    expect(agentCgroups(dataDir).length).toBeGreaterThan(0);
    await sys.stop();
    sys = undefined;
    expect(mounts()).toEqual([]);
    expect(agentCgroups(dataDir)).toEqual([]);
    expect(readFileSync(join(dataDir, "agent.log"), "utf8")).toMatch(/"msg":"destroyed (\d+) of \1 sandboxes/);
  });

  it("that keeps its sandboxes keeps its cgroups while one runs, and removes them once none is left", async () => {
    sys = await startSystem({ dataDir: keepDir, onExit: "keep", baseReplicas: 0 });
    const sbx = await Sandbox.create({ apiUrl: sys.apiUrl, apiKey: sys.apiKey, sandboxUrl: sys.apiUrl, requestTimeoutMs: 60_000 });
    // The agent keeps the sandbox through every stop: one this case does not end outlives the
    // system, and its busy disk blocks the cleanup.
    let killed = false;
    try {
      expect((await sbx.commands.run("echo up")).stdout).toBe("up\n");
      const dirs = agentCgroups(keepDir);
      expect(dirs.length).toBeGreaterThan(0);
      // A restart that keeps the sandbox keeps the subtree it runs in.
      await sys.stopAgent();
      expect(agentCgroups(keepDir)).toEqual(dirs);
      await sys.startAgent();
      expect((await sbx.commands.run("echo still")).stdout).toBe("still\n");
      await sbx.kill();
      killed = true;
      // The kill is answered before the agent has ended it: the stop below must find nothing left.
      const children = () => dirs.flatMap((d) => readdirSync(d, { withFileTypes: true }).filter((e) => e.isDirectory()));
      for (const deadline = Date.now() + 30_000; children().length > 0 && Date.now() < deadline; ) await new Promise((r) => setTimeout(r, 100));
      expect(children()).toEqual([]);
      await sys.stopAgent();
      expect(agentCgroups(keepDir)).toEqual([]);
      for (const d of dirs) expect(existsSync(d)).toBe(false);
    } finally {
      if (!killed) {
        try {
          if (!sys.parts.agent.current) await sys.startAgent();
          await sbx.kill();
        } catch (e) {
          console.warn(`agent-stop: the keep case's sandbox ${sbx.sandboxId} could not be killed: ${String(e)}`);
        }
      }
    }
    await sys.stop();
    sys = undefined;
  });

  it("that stops its sandboxes (npm start's Ctrl-C) keeps them, and leaves no cgroup of its own", async () => {
    sys = await startSystem({ dataDir: stopDir, onExit: "stop", baseReplicas: 0 });
    const sbx = await Sandbox.create({ apiUrl: sys.apiUrl, apiKey: sys.apiKey, sandboxUrl: sys.apiUrl, requestTimeoutMs: 60_000 });
    expect((await sbx.commands.run("echo up")).stdout).toBe("up\n");
    expect(agentCgroups(stopDir).length).toBeGreaterThan(0);
    await sys.stop();
    sys = undefined;
    expect(agentCgroups(stopDir)).toEqual([]);
    expect(readFileSync(join(stopDir, "agent.log"), "utf8")).toMatch(/"msg":"stopped 1 of 1 sandboxes/);
  });
});
