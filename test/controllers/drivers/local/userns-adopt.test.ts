// Holders an agent without user namespaces started (README.md "Holders an older agent started"),
// as a driver with `userns: false` leaves them: root inside them is the host's root. The next
// driver on the same data directory, which makes user namespaces, gives an unclaimed warm member
// a new holder in a range of its own, and leaves a claimed sandbox running (its holder and the
// user's processes untouched) with a warning that names it and a UserNamespaced False condition;
// at its next Stop pause its holder starts in a range of its own, its files moved into that range
// (the user's file still the user's, sudo still setuid), and the condition turns True.
import { mkdtempSync, readFileSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { readRecord } from "../../../../controllers/drivers/local/records.ts";
import type { SandboxUser } from "../../../../controllers/runtime/sandbox-view.ts";
import { adoptAfterRestart, desiredSandbox, destroyAll, shIn } from "./fixture.ts";

const ROOT: SandboxUser = { name: "root", uid: 0, gid: 0, home: "/root", shell: "/bin/bash" };
const dataDir = mkdtempSync(join(tmpdir(), "local-userns-adopt-"));
const cgroupName = `kruise-test-${process.pid}-unadopt`;
let driver = new LocalDriver({ dataDir, cgroupName, userns: false });
afterAll(() => destroyAll(driver, dataDir));

const recordOf = (id: string) => readRecord(join(dataDir, "sandboxes", id, "record.json"))!;
/** The host uids (real, effective) of a host pid. */
const hostUids = (pid: number) => /^Uid:\s+(\d+)\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))!.slice(1, 3).map(Number);
const HOST_MAP = /^\s*0\s+0\s+4294967295$/m;

describe("adopting a holder without a user namespace", () => {
  it("restarts a warm member's holder in a range of its own; leaves a claimed one running, reported, until a Stop pause moves it and its files", async () => {
    const warm = desiredSandbox("ua", { claimed: false });
    const claimed = desiredSandbox("ua", { claimed: true });
    await driver.ensure(warm);
    await driver.ensure(claimed);
    const before = { warm: recordOf(warm.id).nsInit!, claimed: recordOf(claimed.id).nsInit! };
    // Root inside is the host's root: the map is the host's own, the holder host uid 0.
    expect((await shIn(driver, claimed.id, "cat /proc/self/uid_map", ROOT)).stdout).toMatch(HOST_MAP);
    expect(hostUids(before.claimed.pid)).toEqual([0, 0]);
    expect(recordOf(claimed.id).root).toBeDefined();
    await shIn(driver, claimed.id, "echo mine > /home/user/f");
    await shIn(driver, claimed.id, "echo root-only > /root/secret; chmod 600 /root/secret", ROOT);
    const work = (await shIn(driver, claimed.id, "sleep 300 >/dev/null 2>&1 & echo $!")).stdout.trim();

    const restarted = await adoptAfterRestart(driver, () => new LocalDriver({ dataDir, cgroupName }), warm, claimed);
    driver = restarted.driver;
    const warnings = restarted.warnings;

    // The warm member: a new holder, as the range's root on the host; root inside maps there.
    const warmRange = recordOf(warm.id).userns!;
    expect(warmRange.base).toBeGreaterThanOrEqual(2 ** 20);
    expect(recordOf(warm.id).nsInit!.pid).not.toBe(before.warm.pid);
    expect(hostUids(recordOf(warm.id).nsInit!.pid)).toEqual([warmRange.base, warmRange.base]);
    expect((await shIn(driver, warm.id, "cat /proc/self/uid_map", ROOT)).stdout).toMatch(new RegExp(`^\\s*0\\s+${warmRange.base}\\s+65536$`, "m"));
    expect((await driver.observe(warm.id))!.conditions).toBeUndefined();

    // The claimed one: the same holder and the user's process, still the host's root, and said so.
    expect(recordOf(claimed.id).nsInit).toEqual(before.claimed);
    expect(recordOf(claimed.id).userns).toBeUndefined();
    expect((await shIn(driver, claimed.id, `kill -0 ${work} && echo alive`)).stdout).toBe("alive\n");
    expect(warnings.filter((w) => w.includes(warm.id))).toEqual([expect.stringContaining("runs in the host's user namespace (root inside is the host's root) (started by an older agent): an unclaimed warm member, restarted with it")]);
    expect(warnings.filter((w) => w.includes(claimed.id))).toEqual([expect.stringContaining("claimed, left running until its holder restarts (a Stop pause); 1 such sandbox(es)")]);
    const lacking = { type: "UserNamespaced", status: "False", reason: "HostRootHolder", message: expect.stringContaining("root inside is the host's root") };
    expect((await driver.observe(claimed.id))!.conditions).toEqual([lacking]);
    expect((await driver.list()).find((o) => o.id === claimed.id)!.conditions).toEqual([lacking]);

    // A Stop pause: its holder starts in a range of its own, and its files moved with it.
    await driver.ensure({ ...claimed, generation: 4, state: "Paused", pauseStrategy: "Stop" });
    await driver.ensure({ ...claimed, generation: 5, state: "Running" });
    const range = recordOf(claimed.id).userns!;
    expect(range.base).toBeGreaterThanOrEqual(2 ** 20);
    expect(recordOf(claimed.id).hostOwned).toBeUndefined();
    expect(hostUids(recordOf(claimed.id).nsInit!.pid)).toEqual([range.base, range.base]);
    const after = await shIn(driver, claimed.id, "cat /proc/self/uid_map; cat /home/user/f; stat -c %U /home/user/f /home/user; echo more >> /home/user/f && echo appended; cat /root/secret 2>&1; sudo -n cat /root/secret");
    expect(after.stdout).toMatch(new RegExp(`^\\s*0\\s+${range.base}\\s+65536\\nmine\\nuser\\nuser\\nappended\\ncat: /root/secret: Permission denied\\nroot-only\\n$`));
    // On the host, the user's file is the range's 1000, no longer the host's.
    expect(statSync(driver.view(claimed.id).toHost("/home/user/f")).uid).toBe(range.base + 1000);
    expect((await driver.observe(claimed.id))!.conditions).toEqual([{ type: "UserNamespaced", status: "True", reason: "HolderRestarted", message: expect.any(String) }]);
  });
});
