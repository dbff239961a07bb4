// Recreate (an update ops run): a claimed sandbox whose template revision changes gets a new
// holder on the same disk (its files stay, its processes go); the same revision again, or an
// unclaimed warm member, keeps its processes.
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

  it("an unclaimed warm member is never recreated in place", async () => {
    const d = desiredSandbox("rw", { claimed: false, revision: "r1" });
    await driver.ensure(d);
    await startSleeper(d.id);
    await driver.ensure({ ...d, generation: 2, revision: "r2" });
    expect(await sleepers(d.id)).toBe("1");
  });
});
