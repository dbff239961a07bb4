// shiftOwners as the driver's move of an older agent's sandbox into a range uses it (`resume`):
// a move cut short and run again moves what is left and leaves what moved, where a plain second
// run would turn the moved files into nobody.
import { chownSync, lstatSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { IDENTITY } from "../../../../controllers/drivers/local/id-map.ts";
import { shiftOwners } from "../../../../controllers/drivers/local/shift-owners.ts";

const dir = mkdtempSync(join(tmpdir(), "shift-owners-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const range = { base: 3 * 2 ** 20, size: 65536 };
const owner = (name: string) => lstatSync(join(dir, name)).uid;

describe("shiftOwners from the host's ids into a range", () => {
  it("resumed, moves what is left and keeps what moved; a plain second run would not", async () => {
    mkdirSync(join(dir, "home"));
    for (const [name, uid] of [["home/a", 1000], ["home/b", 0], ["home/c", range.base + 1000]] as const) {
      writeFileSync(join(dir, name), name);
      chownSync(join(dir, name), uid, uid);
    }
    await shiftOwners(join(dir, "home"), IDENTITY, range, true);
    expect(["home", "home/a", "home/b", "home/c"].map(owner)).toEqual([range.base, range.base + 1000, range.base, range.base + 1000]);
    // Without `resume`, an owner already in the range is outside the host's first 65536: nobody.
    await shiftOwners(join(dir, "home"), IDENTITY, range);
    expect(owner("home/a")).toBe(range.base + 65534);
  });
});
