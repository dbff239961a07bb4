// Holders an older agent started without the seccomp filter (README.md "Seccomp", "Holders an
// older agent started"), as a driver with `seccomp: false` leaves them: the next driver on the same
// data directory gives an unclaimed warm member a new, filtered holder, and leaves a claimed
// sandbox running (its holder and the user's processes untouched) with a warning that names it and
// counts, and a SeccompFiltered False condition in its observations (the edge shows it); its
// holder gets the filter at its next Stop pause, and the condition turns True.
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { readRecord } from "../../../../controllers/drivers/local/records.ts";
import { adoptAfterRestart, desiredSandbox, destroyAll, shIn } from "./fixture.ts";

const dataDir = mkdtempSync(join(tmpdir(), "local-seccomp-adopt-"));
const cgroupName = `kruise-test-${process.pid}-secadopt`;
let driver = new LocalDriver({ dataDir, cgroupName, seccomp: false });
afterAll(() => destroyAll(driver, dataDir));

const holderOf = (id: string) => readRecord(join(dataDir, "sandboxes", id, "record.json"))!.nsInit!;
/** The kernel's seccomp mode of a host pid (0 none, 2 filter). */
const seccompOf = (pid: number) => /^Seccomp:\s*(\d+)$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1];

describe("adopting an unfiltered holder", () => {
  it("restarts a warm member's holder filtered; leaves a claimed one running, warned about, until a Stop pause", async () => {
    const warm = desiredSandbox("sa", { claimed: false });
    const claimed = desiredSandbox("sa", { claimed: true });
    await driver.ensure(warm);
    await driver.ensure(claimed);
    const before = { warm: holderOf(warm.id), claimed: holderOf(claimed.id) };
    expect([seccompOf(before.warm.pid), seccompOf(before.claimed.pid)]).toEqual(["0", "0"]);
    const work = (await shIn(driver, claimed.id, "sleep 300 >/dev/null 2>&1 & echo $!")).stdout.trim();

    const restarted = await adoptAfterRestart(driver, () => new LocalDriver({ dataDir, cgroupName }), warm, claimed);
    driver = restarted.driver;
    const warnings = restarted.warnings;

    const after = { warm: holderOf(warm.id), claimed: holderOf(claimed.id) };
    expect(after.warm.pid).not.toBe(before.warm.pid);
    expect(seccompOf(after.warm.pid)).toBe("2");
    expect(after.claimed).toEqual(before.claimed);
    expect(seccompOf(after.claimed.pid)).toBe("0");
    expect((await shIn(driver, claimed.id, `kill -0 ${work} && echo alive; grep '^Seccomp:' /proc/self/status`)).stdout).toBe("alive\nSeccomp:\t2\n");
    expect(warnings.filter((w) => w.includes(warm.id))).toEqual([expect.stringContaining("an unclaimed warm member, restarted with it")]);
    expect(warnings.filter((w) => w.includes(claimed.id))).toEqual([expect.stringContaining("claimed, left running until its holder restarts (a Stop pause); 1 such sandbox(es)")]);
    // What the agent reports to the edge (the admin API's conditions): the claimed one says so, the
    // restarted warm member says nothing.
    const seccompCondition = { type: "SeccompFiltered", status: "False", reason: "UnfilteredHolder", message: expect.stringContaining("without the seccomp filter") };
    expect((await driver.observe(claimed.id))!.conditions).toEqual([seccompCondition]);
    expect((await driver.list()).find((o) => o.id === claimed.id)!.conditions).toEqual([seccompCondition]);
    expect((await driver.observe(warm.id))!.conditions).toBeUndefined();

    await driver.ensure({ ...claimed, generation: 4, state: "Paused", pauseStrategy: "Stop" });
    expect((await driver.observe(claimed.id))!.conditions).toEqual([seccompCondition]);
    await driver.ensure({ ...claimed, generation: 5, state: "Running" });
    expect(seccompOf(holderOf(claimed.id).pid)).toBe("2");
    expect((await driver.observe(claimed.id))!.conditions).toEqual([{ type: "SeccompFiltered", status: "True", reason: "HolderRestarted", message: expect.any(String) }]);
  });
});
