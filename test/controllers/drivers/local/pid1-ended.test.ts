// A sandbox whose pid 1 ends by itself (root inside can end it through ptrace; the OOM killer can
// take it) is over, as a VM whose init died: the driver notices within about a second, tells its
// listener (the agent, which reports it), says Failed from then on (after an agent restart too)
// and does not start it again on the next pass; its commands fail with a clear error.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { SandboxUser } from "../../../../controllers/runtime/sandbox-view.ts";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { layoutFor } from "../../../../controllers/drivers/local/layout.ts";
import { readRecord } from "../../../../controllers/drivers/local/records.ts";
import { desiredSandbox, destroyAll, pollUntil, shIn } from "./fixture.ts";
import { PTRACE_KILL_PID1 } from "../../../support/ptrace-kill-pid1.ts";

const ROOT: SandboxUser = { name: "root", uid: 0, gid: 0, home: "/root", shell: "/bin/bash" };
const dataDir = mkdtempSync(join(tmpdir(), "local-pid1-ended-"));
const cgroupName = `kruise-test-${process.pid}-pid1`;
const driver = new LocalDriver({ dataDir, cgroupName });
const told: string[] = [];
driver.onChange((id) => told.push(id));
afterAll(() => destroyAll(driver, dataDir));

async function endedAndReported(id: string, end: () => Promise<unknown>) {
  const before = await driver.observe(id);
  expect(before?.phase).toBe("Running");
  await end();
  // Noticed without any call of ours: the listener hears of it.
  expect(await pollUntil(() => told.includes(id), Boolean, 10_000)).toBe(true);
  expect(await driver.observe(id)).toMatchObject({ phase: "Failed", message: expect.stringContaining("pid 1") });
  expect((await driver.list()).find((s) => s.id === id)?.phase).toBe("Failed");
  await expect(shIn(driver, id, "echo alive")).rejects.toThrow(/not running/);
}

describe("a sandbox whose pid 1 ends by itself", () => {
  it("killed from the host: reported, Failed from then on, not started again by the next pass, nor by a restarted agent", async () => {
    const d = desiredSandbox("pe");
    await driver.ensure(d);
    const nsInit = readRecord(layoutFor(dataDir, d.id).record)!.nsInit!;
    await endedAndReported(d.id, async () => process.kill(nsInit.pid, "SIGKILL"));
    // The pass the agent runs on hearing of it: Failed, and nothing started.
    const seen = await driver.ensure({ ...d, generation: 2 });
    expect(seen).toMatchObject({ phase: "Failed" });
    expect(seen.incarnation).toBeUndefined();
    const restarted = new LocalDriver({ dataDir, cgroupName });
    try {
      expect((await restarted.ensure({ ...d, generation: 3 })).phase).toBe("Failed");
    } finally {
      await restarted.dispose();
    }
    // Replaced on purpose (a Stop pause, then a resume): a new holder, running.
    await driver.ensure({ ...d, generation: 4, state: "Paused", pauseStrategy: "Stop" });
    expect((await driver.ensure({ ...d, generation: 5 })).phase).toBe("Running");
    expect((await shIn(driver, d.id, "echo alive")).stdout).toBe("alive\n");
  });

  it("killed by root inside through ptrace: the same", async () => {
    const d = desiredSandbox("pt");
    await driver.ensure(d);
    await endedAndReported(d.id, () => shIn(driver, d.id, PTRACE_KILL_PID1, ROOT).catch(() => undefined));
  });

  it("ended by the driver itself (a Stop pause, a destroy): not reported", async () => {
    const d = desiredSandbox("ps");
    await driver.ensure(d);
    await driver.ensure({ ...d, generation: 2, state: "Paused", pauseStrategy: "Stop" });
    const other = desiredSandbox("pd");
    await driver.ensure(other);
    await driver.destroy(other.id);
    await new Promise((r) => setTimeout(r, 2500));
    expect(told.filter((id) => id === d.id || id === other.id)).toEqual([]);
  });
});
