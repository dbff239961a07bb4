// A sandbox's pid 1 is an init its tenant cannot end (sandbox-init.ts; controllers/drivers/local/
// README.md "The sandbox's pid 1"), as on a machine of its own: through the real e2b SDK, root
// inside runs `pkill sleep` (its only other process a background `sleep`, which once ended bwrap's
// init with it) or `kill -9 -1`, and the sandbox runs on, not restarted: its pid 1 is the same and
// a file in /dev/shm (memory: a restart loses it) is still there; ptrace of pid 1 is refused.
// A sandbox whose pid 1 ends all the same (the host kills it, the OOM killer may take it) is rebooted, as Kubernetes restarts a dead container: through
// the real e2b SDK, a command works again within a generous bound, without anyone asking about it
// first; a file written before is there, a process started before is gone.
import { Sandbox } from "e2b";
import { join } from "node:path";
import { afterAll, describe, expect, inject, it } from "vitest";
import { layoutFor } from "../../controllers/drivers/local/layout.ts";
import { readRecord, type SandboxRecord } from "../../controllers/drivers/local/records.ts";
import { waitFor } from "../support/wait-for.ts";
import { e2b } from "./sdk.ts";

const made: Sandbox[] = [];
afterAll(async () => {
  for (const s of made) await s.kill().catch(() => false);
});

/** The agent's record of the sandbox, read the driver's way. */
function recordOf(id: string): SandboxRecord {
  return readRecord(layoutFor(join(inject("e2b").dataDir, "agent/local"), id).record)!;
}

/** Processes inside whose command line holds `sleep 4242` (the brackets keep grep's own out). */
const COUNT_MARKED = "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c 'sleep 424[2]' || true";

async function rebootsKeepingFiles(end: (sbx: Sandbox) => Promise<unknown>) {
  const sbx = await Sandbox.create(e2b());
  made.push(sbx);
  // At `process` level pid 1 is the host's init, which the cases below would end.
  expect(recordOf(sbx.sandboxId).level).not.toBe("process");
  await sbx.files.write("/tmp/before", "kept");
  await sbx.commands.run("sleep 4242", { background: true });
  await waitFor(async () => (await sbx.commands.run(COUNT_MARKED)).stdout !== "0\n", { what: "the process started before", timeoutMs: 10_000, intervalMs: 100 });
  const before = recordOf(sbx.sandboxId).nsInit!;
  await end(sbx);
  // A generous bound: the agent hears its holder exit (or, for one it adopted, looks every 5 s)
  // and restarts it at once.
  await waitFor(
    async () => {
      const now = recordOf(sbx.sandboxId).nsInit;
      if (!now || (now.pid === before.pid && now.start === before.start)) return false;
      return (await sbx.commands.run("echo alive").then((r) => r.stdout, () => "")) === "alive\n";
    },
    { what: "a command to run in the restarted sandbox", timeoutMs: 30_000, intervalMs: 200 },
  );
  expect(await sbx.files.read("/tmp/before")).toBe("kept");
  expect((await sbx.commands.run(COUNT_MARKED)).stdout).toBe("0\n");
  expect(await sbx.isRunning()).toBe(true);
}

describe("a sandbox whose pid 1 ends", () => {
  it("killed from the host: restarted, files kept, processes gone", async () => {
    await rebootsKeepingFiles(async (sbx) => process.kill(recordOf(sbx.sandboxId).nsInit!.pid, "SIGKILL"));
  });
});

/** A sandbox with a file in /dev/shm and a background `sleep` when root inside runs `act`: after a
 * while it has the same pid 1, the file, and no sleep left. */
async function runsOn(act: string): Promise<Sandbox> {
  const sbx = await Sandbox.create(e2b());
  made.push(sbx);
  // At `process` level the sandbox has no pid 1 of its own (and these would end the host's processes).
  expect(recordOf(sbx.sandboxId).level).not.toBe("process");
  await sbx.commands.run("echo kept > /dev/shm/state");
  await sbx.commands.run("sleep 4242", { background: true });
  await waitFor(async () => (await sbx.commands.run(COUNT_MARKED)).stdout !== "0\n", { what: "the sleep started before", timeoutMs: 10_000, intervalMs: 100 });
  const before = recordOf(sbx.sandboxId).nsInit!;
  await sbx.commands.run(act, { user: "root" }).catch(() => undefined);
  // An end would be heard at once, and the restart follows within a second: two are ample.
  await new Promise((r) => setTimeout(r, 2000));
  expect(recordOf(sbx.sandboxId).nsInit).toEqual(before);
  expect((await sbx.commands.run("cat /dev/shm/state")).stdout).toBe("kept\n");
  expect((await sbx.commands.run(COUNT_MARKED)).stdout).toBe("0\n");
  expect(await sbx.isRunning()).toBe(true);
  return sbx;
}

describe("a sandbox's pid 1: root inside cannot end it", () => {
  it("`pkill sleep`: the sleep ends, the sandbox runs on", async () => {
    await runsOn("pkill sleep");
  });

  it("`kill -9 -1`: every other process ends, the sandbox runs on; ptrace of pid 1 is refused", async () => {
    const sbx = await runsOn("kill -9 -1");
    const attach = `python3 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); l.ptrace.argtypes = [ctypes.c_long] * 2 + [ctypes.c_void_p] * 2; print(l.ptrace(16, 1, None, None), ctypes.get_errno())'`;
    expect((await sbx.commands.run(attach, { user: "root" })).stdout).toBe("-1 1\n"); // EPERM
  });
});
