// remove-tree.ts `unmountThenRemove`, a destroy's unmount and deletion in one helper process (root):
// nothing is deleted while a mount below the directory stays, even a bind mount of the same file
// system, which `rm --one-file-system` would walk through; once it unmounts, the directory goes and
// what was mounted there is untouched.
import { execFileSync } from "node:child_process";
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it, vi } from "vitest";
import { unmountThenRemove } from "../../../../controllers/drivers/local/remove-tree.ts";
import { syscallNumbers } from "../../../../controllers/drivers/local/host-helpers.ts";
import { unmountAndRemoveSandbox } from "../../../../controllers/drivers/local/root-overlay.ts";
import { Spawner } from "../../../../controllers/drivers/local/spawner.ts";
import { mountsUnder } from "../../../../controllers/drivers/local/userns.ts";

const { umount2 } = syscallNumbers();
const top = mkdtempSync(join(tmpdir(), "unmount-then-remove-"));
const spawner = new Spawner();
afterAll(async () => {
  await spawner.dispose();
  for (const at of mountsUnder(top)) execFileSync("umount", ["-l", at]);
  rmSync(top, { recursive: true, force: true });
}, 30_000);

/** `dir` with a file of its own and `dir/m`, a bind mount of `kept` (the same file system). */
function sandboxDir(name: string): { dir: string; kept: string; m: string } {
  const dir = join(top, name);
  const kept = join(top, `${name}-kept`);
  mkdirSync(join(dir, "m"), { recursive: true });
  mkdirSync(kept);
  writeFileSync(join(kept, "precious"), "kept");
  writeFileSync(join(dir, "record"), "x");
  execFileSync("mount", ["--bind", kept, join(dir, "m")]);
  return { dir, kept, m: join(dir, "m") };
}

/** `dir` with a file of its own and `dir/m`, a tmpfs holding a file (a disk: another file system,
 * as root-overlay.ts's isMounted sees one). */
function diskDir(name: string): { dir: string; m: string } {
  const dir = join(top, name);
  mkdirSync(join(dir, "m"), { recursive: true });
  writeFileSync(join(dir, "record"), "x");
  execFileSync("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", join(dir, "m")]);
  writeFileSync(join(dir, "m", "f"), "x");
  return { dir, m: join(dir, "m") };
}

describe("unmountThenRemove", { timeout: 30_000 }, () => {
  it("deletes or moves nothing while a mount below stays (busy), says which; then unmounts, moves the image aside and deletes the directory, never through the mount", async () => {
    const { dir, kept, m } = sandboxDir("busy");
    writeFileSync(join(dir, "disk.img"), "image");
    const aside = { from: join(dir, "disk.img"), to: join(top, "busy.img") };
    const fd = openSync(join(m, "precious"), "r");
    let r: Awaited<ReturnType<typeof unmountThenRemove>>;
    try {
      r = await unmountThenRemove(spawner, dir, [m], umount2, aside);
    } finally {
      closeSync(fd);
    }
    expect(r.done).toBe("not-unmounted");
    expect(r.why).toContain(`umount ${m}`);
    expect(mountsUnder(dir)).toEqual([m]);
    expect(readFileSync(join(kept, "precious"), "utf8")).toBe("kept");
    expect(existsSync(join(dir, "record"))).toBe(true);
    expect(existsSync(aside.to)).toBe(false);

    expect(await unmountThenRemove(spawner, dir, [m], umount2, aside)).toEqual({ done: "removed", why: "" });
    // The image was moved aside after the unmount, not deleted.
    expect(readFileSync(aside.to, "utf8")).toBe("image");
    expect(existsSync(dir)).toBe(false);
    expect(mountsUnder(dir)).toEqual([]);
    expect(readFileSync(join(kept, "precious"), "utf8")).toBe("kept");
  });

  it("on a CPU without the helper's syscall number, unmounts the old way and leaves the directory to the caller", async () => {
    const { dir, m } = diskDir("riscv");
    expect(await unmountAndRemoveSandbox(spawner, join(dir, "root"), m, dir, undefined, "riscv64")).toEqual({ removed: false, moved: false });
    expect(mountsUnder(dir)).toEqual([]);
    expect(existsSync(join(dir, "record"))).toBe(true);
  });

  it("a destroy whose helper stops logs the helper's why in one line", async () => {
    const { dir, m } = diskDir("why");
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const fd = openSync(join(m, "f"), "r");
    let lines: string[];
    try {
      expect(await unmountAndRemoveSandbox(spawner, join(dir, "root"), m, dir)).toEqual({ removed: false, moved: false });
    } finally {
      closeSync(fd);
      lines = warn.mock.calls.map((c) => String(c[0]));
      warn.mockRestore();
    }
    expect(lines.some((l) => l.includes("not-unmounted") && l.includes(`umount ${m}`) && !l.includes("\n"))).toBe(true);
    expect(mountsUnder(dir)).toEqual([]);
  });
});
