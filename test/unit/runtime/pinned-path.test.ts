// The walk that pins a file operation's directory (pinned-path.ts): once pinned, a directory on
// the way swapped for a link to elsewhere does not move the operation; a link met on the way is
// never followed.
import { existsSync, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { PIN_ATTEMPTS, PathChangedError, pinResolved, pinUnder } from "../../../controllers/runtime/pinned-path.ts";

let top: string;
let root: string;
let outside: string;
beforeEach(() => {
  top = mkdtempSync(join(tmpdir(), "pinned-"));
  root = join(top, "root");
  outside = join(top, "outside");
  mkdirSync(join(root, "a/d"), { recursive: true });
  mkdirSync(outside);
});
afterEach(() => rmSync(top, { recursive: true, force: true }));

describe("pinUnder", () => {
  it("holds the directory: swapped for a link after the walk, the operation still lands inside", () => {
    const p = pinUnder(root, ["a", "d", "f"], "/a/d/f");
    try {
      renameSync(join(root, "a/d"), join(root, "a/d.real"));
      symlinkSync(outside, join(root, "a/d"));
      writeFileSync(p.host, "x");
      expect(readdirSync(outside)).toEqual([]);
      expect(existsSync(join(root, "a/d.real/f"))).toBe(true);
    } finally {
      p.close();
    }
  });

  it("never follows a link on the way, and reports what is missing for a caller that makes it", () => {
    symlinkSync(outside, join(root, "a/l"));
    expect(() => pinUnder(root, ["a", "l", "f"], "/a/l/f")).toThrow(PathChangedError);
    expect(() => pinUnder(root, ["a", "n", "m", "f"], "/a/n/m/f")).toThrow(expect.objectContaining({ code: "ENOENT" }));
    const p = pinUnder(root, ["a", "n", "m", "f"], "/a/n/m/f", true);
    expect(p.missing).toEqual(["n", "m"]);
    expect(() => p.host).toThrow(expect.objectContaining({ code: "ENOENT" }));
    p.close();
  });

  it("pins a start directory itself as its `.`, which looks like the directory", () => {
    const p = pinUnder(root, [], "/");
    expect([p.name, p.lstat()?.isDirectory()]).toEqual([".", true]);
    p.close();
  });
});

describe("pinResolved", () => {
  it("resolves again when a link turns up, and gives up (ELOOP) when it keeps turning up", () => {
    symlinkSync(outside, join(root, "a/l"));
    let calls = 0;
    const p = pinResolved("/a/l/f", () => (++calls === 1 ? { start: root, rest: "/a/l/f", sandboxPath: "/a/l/f" } : { start: root, rest: "/a/d/f", sandboxPath: "/a/d/f" }), false);
    expect([calls, p.sandboxPath, p.name]).toEqual([2, "/a/d/f", "f"]);
    p.close();
    calls = 0;
    expect(() => pinResolved("/a/l/f", () => (calls++, { start: root, rest: "/a/l/f", sandboxPath: "/a/l/f" }), false)).toThrow(expect.objectContaining({ code: "ELOOP" }));
    expect(calls).toBe(PIN_ATTEMPTS);
  });
});
