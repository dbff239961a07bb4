// A sandbox whose pid 1 ends (root inside ends bwrap's init by ending its `sleep` or through
// ptrace; the OOM killer may take it) is rebooted, as Kubernetes restarts a dead container: through
// the real e2b SDK, a command works again within a generous bound, without anyone asking about it
// first; a file written before is there, a process started before is gone.
import { Sandbox } from "e2b";
import { join } from "node:path";
import { afterAll, describe, expect, inject, it } from "vitest";
import { layoutFor } from "../../controllers/drivers/local/layout.ts";
import { readRecord, type SandboxRecord } from "../../controllers/drivers/local/records.ts";
import { waitFor } from "../support/wait-for.ts";
import { e2b } from "./sdk.ts";
import { PTRACE_KILL_PID1 } from "../support/ptrace-kill-pid1.ts";

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
  it("killed by root inside through ptrace: restarted, files kept, processes gone", async () => {
    await rebootsKeepingFiles(async (sbx) => {
      const r = await sbx.commands.run(`(${PTRACE_KILL_PID1}\n) 2>&1`, { user: "root" }).catch((err: Error) => ({ stdout: err.message }));
      expect(r.stdout, "ptrace refused (Yama ptrace_scope?)").not.toMatch(/PTRACE_ATTACH|refused/);
    });
  });

  it("root inside ends its sleep: the same", async () => {
    await rebootsKeepingFiles((sbx) => sbx.commands.run("kill -9 $(cat /proc/1/task/1/children)", { user: "root" }).catch(() => undefined));
  });

  it("killed from the host: the same", async () => {
    await rebootsKeepingFiles(async (sbx) => process.kill(recordOf(sbx.sandboxId).nsInit!.pid, "SIGKILL"));
  });
});
