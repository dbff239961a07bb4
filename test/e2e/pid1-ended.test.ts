// A sandbox whose pid 1 ends (root inside may end it through ptrace; the OOM killer may take it)
// is over, as a VM whose init died: through the real e2b SDK, it leaves the list of running
// sandboxes within seconds, without anyone asking about it first, and a command against it fails.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { afterAll, describe, expect, inject, it } from "vitest";
import { waitFor } from "../support/wait-for.ts";
import { e2b } from "./sdk.ts";
import { PTRACE_KILL_PID1 } from "../support/ptrace-kill-pid1.ts";

const made: Sandbox[] = [];
afterAll(async () => {
  for (const s of made) await s.kill().catch(() => false);
});

async function runningIds(): Promise<string[]> {
  return (await Sandbox.list({ ...e2b(), query: { state: ["running"] } }).nextItems()).map((s) => s.sandboxId);
}

async function endsAndLeavesTheList(end: (sbx: Sandbox) => Promise<unknown>) {
  const sbx = await Sandbox.create(e2b());
  made.push(sbx);
  expect((await sbx.commands.run("echo alive")).stdout).toBe("alive\n");
  expect(await runningIds()).toContain(sbx.sandboxId);
  await end(sbx);
  // A generous bound: the agent looks about once a second.
  await waitFor(async () => !(await runningIds()).includes(sbx.sandboxId), { what: "the sandbox to leave the running list", timeoutMs: 20_000, intervalMs: 200 });
  await expect(sbx.commands.run("echo alive")).rejects.toThrow(/not found|not running/i);
  await expect(Sandbox.getInfo(sbx.sandboxId, e2b())).rejects.toThrow(/doesn't exist|not found/i);
}

describe("a sandbox whose pid 1 ends", () => {
  it("killed by root inside through ptrace: it leaves the running list and its commands fail", async () => {
    await endsAndLeavesTheList((sbx) => sbx.commands.run(PTRACE_KILL_PID1, { user: "root" }).catch(() => undefined));
  });

  it("killed from the host: the same", async () => {
    const { dataDir } = inject("e2b");
    await endsAndLeavesTheList(async (sbx) => {
      const rec = JSON.parse(readFileSync(join(dataDir, "agent/local/sandboxes", sbx.sandboxId, "record.json"), "utf8")) as { nsInit?: { pid: number } };
      process.kill(rec.nsInit!.pid, "SIGKILL");
    });
  });
});
