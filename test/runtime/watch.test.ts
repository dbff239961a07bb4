import { FileNotFoundError, FilesystemEventType, SandboxError, type FilesystemEvent } from "e2b";
import { describe, expect, it } from "vitest";
import { useSandboxWithDir } from "./support/harness.ts";

const fx = useSandboxWithDir("rt-watch");

function has(events: FilesystemEvent[], type: FilesystemEventType, name: string) {
  return events.some((e) => e.type === type && e.name === name);
}

describe("watchDir", () => {
  it("reports a write to a file in the directory", async () => {
    const d = `${fx.dir}/plain`;
    await fx.sbx.files.write(`${d}/f.txt`, "one");
    const events: FilesystemEvent[] = [];
    const w = await fx.sbx.files.watchDir(d, (e) => void events.push(e));
    await fx.sbx.files.write(`${d}/f.txt`, "two");
    await expect.poll(() => has(events, FilesystemEventType.WRITE, "f.txt"), { timeout: 3000 }).toBe(true);
    await fx.sbx.files.remove(`${d}/f.txt`);
    await expect.poll(() => has(events, FilesystemEventType.REMOVE, "f.txt"), { timeout: 3000 }).toBe(true);
    await w.stop();
  });

  it("reports chmod separately from writes", async () => {
    const d = `${fx.dir}/chmod`;
    await fx.sbx.files.write(`${d}/f.txt`, "x");
    const events: FilesystemEvent[] = [];
    const w = await fx.sbx.files.watchDir(d, (e) => void events.push(e));
    await fx.sbx.commands.run(`chmod 600 ${d}/f.txt`);
    await expect.poll(() => has(events, FilesystemEventType.CHMOD, "f.txt"), { timeout: 3000 }).toBe(true);
    expect(has(events, FilesystemEventType.WRITE, "f.txt")).toBe(false);
    await w.stop();
  });

  it("recursive: sees a new subdirectory and writes inside it, with entries", async () => {
    const d = `${fx.dir}/rec`;
    await fx.sbx.files.makeDir(d);
    const events: FilesystemEvent[] = [];
    const w = await fx.sbx.files.watchDir(d, (e) => void events.push(e), { recursive: true, includeEntry: true });
    await fx.sbx.files.makeDir(`${d}/nested`);
    await expect.poll(() => has(events, FilesystemEventType.CREATE, "nested"), { timeout: 3000 }).toBe(true);
    await fx.sbx.files.write(`${d}/nested/f.txt`, "deep");
    await expect.poll(() => has(events, FilesystemEventType.WRITE, "nested/f.txt"), { timeout: 3000 }).toBe(true);
    const created = events.find((e) => e.name === "nested" && e.type === FilesystemEventType.CREATE)!;
    expect(created.entry).toMatchObject({ name: "nested", path: `${d}/nested`, type: "dir" });
    await w.stop();
  });

  it("missing directory is FileNotFoundError, a file is a SandboxError", async () => {
    await expect(fx.sbx.files.watchDir(`${fx.dir}/missing`, () => {})).rejects.toBeInstanceOf(FileNotFoundError);
    await fx.sbx.files.write(`${fx.dir}/afile`, "x");
    const err = await fx.sbx.files.watchDir(`${fx.dir}/afile`, () => {}).catch((e) => e);
    expect(err).toBeInstanceOf(SandboxError);
    expect(err).not.toBeInstanceOf(FileNotFoundError);
  });
});
