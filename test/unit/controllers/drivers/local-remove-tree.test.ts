// remove-tree.ts without root or a spawner: a tree whose names and links a tenant chose goes whole,
// nothing outside it is touched, and the `rm` it starts takes nothing from the agent's own
// environment (a loader, shell or perl variable there, or a program named rm earlier on its PATH).
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { removeTree } from "../../../../controllers/drivers/local/remove-tree.ts";
import { hostileEnv } from "../../../support/hostile-env.ts";

const dir = mkdtempSync(join(tmpdir(), "remove-tree-unit-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("removeTree", () => {
  it("deletes a tenant-named tree without following its links, with a fixed environment whatever the agent's", async () => {
    const host = join(dir, "host");
    mkdirSync(host);
    writeFileSync(join(host, "secret"), "kept");
    const tree = join(dir, "layer");
    let at = tree;
    for (let i = 0; i < 50; i++) mkdirSync((at = join(at, "a")), { recursive: true });
    for (const name of ["--no-preserve-root", "-rf", "$(touch pwned)", "a\nb", " "]) writeFileSync(join(at, name), "x");
    symlinkSync(host, join(at, "to-host"));
    symlinkSync(join(host, "secret"), join(tree, "secret-link"));
    // A program named rm first on the agent's PATH, and the variables that run code at a start.
    const fake = join(dir, "bin");
    mkdirSync(fake);
    writeFileSync(join(fake, "rm"), `#!/bin/sh\ntouch ${join(dir, "fake-rm-ran")}\n`);
    chmodSync(join(fake, "rm"), 0o755);
    const hostile = hostileEnv();
    const saved = { ...process.env };
    Object.assign(process.env, hostile.env, { PATH: `${fake}:${process.env.PATH}` });
    try {
      await removeTree([tree, join(dir, "never-made")]);
    } finally {
      for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
      Object.assign(process.env, saved);
    }
    expect(existsSync(tree)).toBe(false);
    expect(readFileSync(join(host, "secret"), "utf8")).toBe("kept");
    expect(existsSync(join(dir, "fake-rm-ran"))).toBe(false);
    expect(existsSync(join(dir, "pwned"))).toBe(false);
    expect(hostile.ran()).toEqual([]);
    hostile.dispose();
  });

  it("refuses a relative path, and resolves at once when nothing named is there", async () => {
    await expect(removeTree(["layer"])).rejects.toThrow(/not an absolute path/);
    await expect(removeTree([join(dir, "absent-1"), join(dir, "absent-2")])).resolves.toBeUndefined();
  });
});
