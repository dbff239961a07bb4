// The agent's log (what it prints names sandboxes, build steps and tenant paths) is its owner's
// alone, also when an older run left the file readable by every host user.
import { closeSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { openPrivateLog } from "../../../scripts/lib/system.ts";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe("openPrivateLog", () => {
  it("makes a new log 0600 and tightens an existing 0644 one, keeping what it holds", () => {
    const dir = mkdtempSync(join(tmpdir(), "agent-log-"));
    dirs.push(dir);
    const fresh = join(dir, "new.log");
    closeSync(openPrivateLog(fresh));
    expect(statSync(fresh).mode & 0o777).toBe(0o600);

    const old = join(dir, "agent.log");
    writeFileSync(old, "earlier\n", { mode: 0o644 });
    expect(statSync(old).mode & 0o777).toBe(0o644);
    const fd = openPrivateLog(old);
    writeSync(fd, "later\n");
    closeSync(fd);
    expect(statSync(old).mode & 0o777).toBe(0o600);
    expect(readFileSync(old, "utf8")).toBe("earlier\nlater\n");
  });

  it("leaves a log that is not a regular file as it is", () => {
    const before = statSync("/dev/null").mode;
    closeSync(openPrivateLog("/dev/null"));
    expect(statSync("/dev/null").mode).toBe(before);
  });
});
