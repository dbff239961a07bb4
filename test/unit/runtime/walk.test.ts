import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { byteOrder, walk } from "../../../controllers/runtime/filesystem/walk.ts";

let root: string;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "walk-"));
  for (const d of ["b", "a", "a/z", "a/y", "B", "a.d"]) mkdirSync(join(root, d), { recursive: true });
  for (const f of ["a/z/f", "a/y/deep", "a/file", "c.txt", "a.d/x"]) writeFileSync(join(root, f), "");
  symlinkSync(join(root, "a"), join(root, "link-to-a"));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("walk (filepath.WalkDir order)", () => {
  it("depth 1 lists the root's entries bytewise sorted, root excluded", async () => {
    expect((await walk(root, 1)).map((e) => e.rel)).toEqual(["B", "a", "a.d", "b", "c.txt", "link-to-a"]);
  });

  it("deeper walks go depth first, each directory before its contents, symlinks not followed", async () => {
    expect((await walk(root, 2)).map((e) => e.rel)).toEqual([
      "B", "a", "a/file", "a/y", "a/z", "a.d", "a.d/x", "b", "c.txt", "link-to-a",
    ]);
    expect((await walk(root, 3)).map((e) => e.rel)).toContain("a/y/deep");
  });

  it("sorts by bytes, not locale", () => {
    expect(["é", "z", "Z", "a"].sort(byteOrder)).toEqual(["Z", "a", "z", "é"]);
  });
});
