// Recreate (an update ops run): a claimed sandbox whose template revision changes gets a new
// holder on the same disk (its files stay, its processes go); the same revision again, or an
// unclaimed warm member, keeps its processes. With `restoreFs` (CheckpointRestore) the files go
// back to the snapshot's as it is recreated, running or Stop-paused, once per snapshot id.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { desiredSandbox, destroyAll, shIn } from "./fixture.ts";

const dataDir = mkdtempSync(join(tmpdir(), "local-driver-recreate-"));
const driver = new LocalDriver({ dataDir, cgroupName: `kruise-test-${process.pid}-recreate` });

afterAll(() => destroyAll(driver, dataDir));

const sleepers = async (id: string) => (await shIn(driver, id, "pgrep -cf '^sleep 10000[3]' || true")).stdout.trim();
const startSleeper = (id: string) => shIn(driver, id, "setsid sleep 100003 </dev/null >/dev/null 2>&1 &");

describe("local driver: Recreate on a new revision", () => {
  it("a claimed sandbox moved to another revision keeps its files and gets new processes", async () => {
    const d = desiredSandbox("rc", { claimed: true, revision: "r1" });
    await driver.ensure(d);
    await shIn(driver, d.id, "echo kept > /home/user/keep.txt");
    await startSleeper(d.id);
    expect(await sleepers(d.id)).toBe("1");
    // A newer intent at the same revision (a pause, a network change) keeps the processes.
    await driver.ensure({ ...d, generation: 2 });
    expect(await sleepers(d.id)).toBe("1");
    const obs = await driver.ensure({ ...d, generation: 3, revision: "r2" });
    expect(obs.phase).toBe("Running");
    expect(await sleepers(d.id)).toBe("0");
    expect((await shIn(driver, d.id, "cat /home/user/keep.txt")).stdout.trim()).toBe("kept");
  });

  it("CheckpointRestore: recreated with restoreFs, a running and a Stop-paused sandbox get the snapshot's files back (a file written after the snapshot is gone); the same id again restores nothing", async () => {
    const run = desiredSandbox("rr", { claimed: true, revision: "r1" });
    const stop = desiredSandbox("rs", { claimed: true, revision: "r1", pauseStrategy: "Stop" });
    for (const d of [run, stop]) {
      await driver.ensure(d);
      await shIn(driver, d.id, "echo before > /home/user/before.txt");
    }
    const snaps = await Promise.all([run, stop].map((d) => driver.snapshotFs(d.id, `ck${d.id}`)));
    for (const d of [run, stop]) await shIn(driver, d.id, "echo after > /home/user/after.txt; echo changed > /home/user/before.txt");
    await startSleeper(run.id);
    await driver.ensure({ ...stop, generation: 2, state: "Paused" });
    const obs = await driver.ensure({ ...run, generation: 2, revision: "r2", restoreFs: { id: snaps[0]!.id } });
    expect(obs.phase).toBe("Running");
    await driver.ensure({ ...stop, generation: 3, state: "Paused", revision: "r2", restoreFs: { id: snaps[1]!.id } });
    expect((await driver.observe(stop.id))?.phase).toBe("Stopped");
    await driver.ensure({ ...stop, generation: 4, revision: "r2", restoreFs: { id: snaps[1]!.id } });
    for (const d of [run, stop]) expect((await shIn(driver, d.id, "ls /home/user; cat /home/user/before.txt; stat -c %U /home/user/before.txt")).stdout).toBe("before.txt\nbefore\nuser\n");
    expect(await sleepers(run.id)).toBe("0");
    // The same snapshot named again (the edge repeats it until the upgrade is done) restores nothing.
    await shIn(driver, run.id, "echo again > /home/user/again.txt");
    await driver.ensure({ ...run, generation: 3, revision: "r2", restoreFs: { id: snaps[0]!.id } });
    expect((await shIn(driver, run.id, "cat /home/user/again.txt")).stdout).toBe("again\n");
    for (const s of snaps) await driver.deleteSnapshot(s);
  });

  it("an unclaimed warm member is never recreated in place", async () => {
    const d = desiredSandbox("rw", { claimed: false, revision: "r1" });
    await driver.ensure(d);
    await startSleeper(d.id);
    await driver.ensure({ ...d, generation: 2, revision: "r2" });
    expect(await sleepers(d.id)).toBe("1");
  });
});
