// The agent's side of a command's pid report (enter.pl writes it, spawner-sandbox-pid.ts reads
// it): a report written while the start waits is taken; one written just before the wrapper
// ended is still taken once the end is known (a command done at once: the poll of /proc this
// replaced missed those, and the host pid went to the client); no report by the end means none.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { sandboxPidOf } from "../../../../controllers/drivers/local/spawner-sandbox-pid.ts";

const dir = mkdtempSync(join(tmpdir(), "sandbox-pid-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;
const file = () => join(dir, `pid-${++n}`);

describe("sandboxPidOf", () => {
  it("takes a report that comes while the start waits", async () => {
    const f = file();
    writeFileSync(f, "");
    const pid = sandboxPidOf(f, new Promise(() => {}));
    setTimeout(() => writeFileSync(f, "42\n"), 20);
    expect(await pid).toBe(42);
  });

  it("takes a report that was written before the wrapper's end, however soon that end came", async () => {
    const f = file();
    writeFileSync(f, "");
    let ended!: () => void;
    const pid = sandboxPidOf(f, new Promise<void>((r) => (ended = r)));
    writeFileSync(f, "7\n");
    ended();
    expect(await pid).toBe(7);
  });

  it("no report (or a malformed one) by the end is none", async () => {
    const empty = file();
    writeFileSync(empty, "");
    expect(await sandboxPidOf(empty, Promise.resolve())).toBeUndefined();
    const f = file();
    writeFileSync(f, "7");
    expect(await sandboxPidOf(f, Promise.resolve())).toBeUndefined();
  });
});
