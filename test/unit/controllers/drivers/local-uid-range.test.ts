// The uid-range allocator's pure parts: slots above the base, never a host user's or group's id,
// a subordinate range or id 0, and the host lease walk (a temporary lease directory stands in for
// /run/kruise-uids).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { DEFAULT_UID_BASE, HostIds, hostIdRanges, overlaps, RANGE_SIZE, slotCount, slotRange, UidRanges, usableSlot } from "../../../../controllers/drivers/local/uid-range.ts";

const files: Record<string, string> = {
  "/etc/passwd": "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534::/:/bin/false\nbig:x:1114112:1114112::/:/bin/false\n",
  "/etc/group": "root:x:0:\nodd:x:1200000:\n",
  "/etc/subuid": "alice:1310720:65536\n",
  "/etc/subgid": "bogus line\n",
};

describe("uid ranges", () => {
  const host = hostIdRanges((f) => files[f]);

  it("reads every host uid, gid and subordinate range", () => {
    expect(host).toContainEqual({ base: 0, size: 1 });
    expect(host).toContainEqual({ base: 1114112, size: 1 });
    expect(host).toContainEqual({ base: 1200000, size: 1 });
    expect(host).toContainEqual({ base: 1310720, size: 65536 });
    expect(host).toHaveLength(9);
  });

  it("slots are 65536 ids from the base, and never overlap a host id or range", () => {
    expect(slotRange(DEFAULT_UID_BASE, 0)).toEqual({ base: 1048576, size: RANGE_SIZE });
    expect(slotRange(DEFAULT_UID_BASE, 3)).toEqual({ base: 1048576 + 3 * 65536, size: RANGE_SIZE });
    expect(usableSlot(DEFAULT_UID_BASE, 0, host)).toBe(true);
    // 1114112 (a host user) is the first id of slot 1; 1200000 (a group) is inside slot 2;
    // alice's subordinate range is slot 4.
    expect([1, 2, 3, 4, 5].map((n) => usableSlot(DEFAULT_UID_BASE, n, host))).toEqual([false, false, true, false, true]);
    // Host root is never in a range; the last slot stays below (uid_t)-1.
    expect(usableSlot(0, 0, [])).toBe(false);
    const last = slotCount(DEFAULT_UID_BASE) - 1;
    expect(slotRange(DEFAULT_UID_BASE, last).base + RANGE_SIZE - 1).toBeLessThanOrEqual(2 ** 32 - 2);
    expect(usableSlot(DEFAULT_UID_BASE, last + 1, [])).toBe(false);
    expect(overlaps({ base: 10, size: 5 }, { base: 14, size: 1 })).toBe(true);
    expect(overlaps({ base: 10, size: 5 }, { base: 15, size: 1 })).toBe(false);
  });

  const dir = mkdtempSync(join(tmpdir(), "uid-leases-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("leases distinct ranges, keeps a recorded one, and frees it", () => {
    const ranges = new UidRanges(2 ** 30, dir);
    const a = ranges.keep(undefined, "/nowhere/a/record.json");
    const b = ranges.keep(undefined, "/nowhere/b/record.json");
    expect(overlaps(a, b)).toBe(false);
    expect(ranges.keep(a, "/nowhere/a/record.json")).toEqual(a);
    // b's lease is young, so another sandbox asking for it gets a new range.
    expect(ranges.keep(b, "/nowhere/c/record.json")).not.toEqual(b);
    ranges.release(a, "/nowhere/a/record.json");
    expect(new UidRanges(2 ** 30, dir).keep(a, "/nowhere/d/record.json")).toEqual(a);
  });

  it("sees a host user added after the first lease, and reads the files once while none changes", () => {
    const root = join(dir, "host");
    mkdirSync(join(root, "etc"), { recursive: true });
    const passwd = (uid: number) => writeFileSync(join(root, "etc/passwd"), `root:x:0:0::/root:/bin/sh\nu:x:${uid}:${uid}::/:/bin/sh\n`);
    writeFileSync(join(root, "etc/group"), "root:x:0:\n");
    passwd(1114112);
    // A minute on: the files' changes are past the racy window.
    const later = new HostIds(root, () => Date.now() + 60_000);
    const first = later.ranges();
    expect(first).toContainEqual({ base: 1114112, size: 1 });
    expect(later.ranges()).toBe(first);
    // Slot 2 of the default base, which a lease would have handed out.
    passwd(1200000);
    const next = later.ranges();
    expect(next).toContainEqual({ base: 1200000, size: 1 });
    expect(next).not.toContainEqual({ base: 1114112, size: 1 });
    // Now: the files changed within the racy window, so each look reads them again (a second
    // change within the same timestamp tick would leave the stamp as it was).
    const now = new HostIds(root);
    expect(now.ranges()).not.toBe(now.ranges());
  });
});
