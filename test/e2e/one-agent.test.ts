// One agent per data dir (controllers/agent/data-dir-lock.ts). Two agents on one (two `npm
// start`s) both adopted and reconciled the same holders, disks and intents. Now the second exits
// at once, non-zero, with one line naming the first's pid, and the first's sandbox goes on as it
// was (same pid 1, its /dev/shm state, commands answered); once the first has exited, an agent
// starts there again (the kernel dropped the lock with the first's process).
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { afterAll, describe, expect, it } from "vitest";
import { startSystem, type System } from "../../scripts/lib/system.ts";
import { clusterTokenFor } from "../../schema/protocol/cluster-token.ts";

const dataDir = mkdtempSync(join(tmpdir(), "sbx-one-agent-"));
let sys: System | undefined;
afterAll(async () => {
  await sys?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

/** A second agent on the system's data dir, as a second `npm start` runs it: its exit and output,
 * or, when it has not exited within `ms`, that (it is then killed). */
async function secondAgent(s: System, ms: number): Promise<{ code: number | null; out: string; exited: boolean }> {
  const child = spawn(join(process.cwd(), "node_modules/.bin/node"), ["controllers/agent/main.ts", "--edge", s.apiUrl, "--data-dir", join(dataDir, "agent"), "--ingress-port", "0", "--on-exit", "keep"], {
    cwd: process.cwd(),
    env: { ...process.env, CLUSTER_TOKEN: await clusterTokenFor(s.secrets.clusterToken, "local") },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout.on("data", (c) => (out += c));
  child.stderr.on("data", (c) => (out += c));
  const exit = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  const timer = new Promise<"running">((r) => setTimeout(() => r("running"), ms));
  const first = await Promise.race([exit, timer]);
  if (first === "running") {
    child.kill("SIGKILL");
    await exit;
    return { code: null, out, exited: false };
  }
  return { code: first, out, exited: true };
}

describe("two agents on one data dir", () => {
  it("the second refuses to start, naming the first's pid; the first's sandbox is untouched; after the first exits, another starts", async () => {
    sys = await startSystem({ dataDir, baseReplicas: 0 });
    const sbx = await Sandbox.create({ apiUrl: sys.apiUrl, apiKey: sys.apiKey, sandboxUrl: sys.apiUrl, requestTimeoutMs: 60_000 });
    await sbx.commands.run("echo kept > /dev/shm/state");
    // pid 1's start time (field 22 of its stat): a restarted sandbox has another.
    const pid1 = async () => (await sbx.commands.run("cut -d' ' -f22 /proc/1/stat")).stdout;
    const before = await pid1();
    const first = sys.parts.agent.current!.pid;

    // Refused at start, before it has touched anything: seconds at most even on a loaded machine.
    const second = await secondAgent(sys, 30_000);
    expect(second.exited).toBe(true);
    expect(second.code).not.toBe(0);
    const errors = second.out.trim().split("\n").filter((l) => l.includes('"level":"error"'));
    expect(errors).toHaveLength(1);
    expect(errors[0]).toContain(`data dir ${join(dataDir, "agent")} is in use by another agent (pid ${first})`);

    expect(sys.parts.agent.current!.pid).toBe(first);
    expect((await sbx.commands.run("cat /dev/shm/state")).stdout).toBe("kept\n");
    expect(await pid1()).toBe(before);

    // The first gone (its stop destroys its sandboxes: the system's on-exit), a new one starts.
    await sys.stopAgent();
    await sys.startAgent();
    expect(sys.parts.agent.current!.pid).not.toBe(first);
    const next = await Sandbox.create({ apiUrl: sys.apiUrl, apiKey: sys.apiKey, sandboxUrl: sys.apiUrl, requestTimeoutMs: 60_000 });
    expect((await next.commands.run("echo again")).stdout).toBe("again\n");
  }, 180_000);
});
