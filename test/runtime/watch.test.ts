import { randomBytes } from "node:crypto";
import { FileNotFoundError, FilesystemEventType, SandboxError, type FilesystemEvent, type Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHarness, type Harness } from "./support/harness.ts";

let h: Harness;
let sbx: Sandbox;
let dir: string;
beforeAll(async () => {
  h = await startHarness();
  sbx = await h.create();
  dir = `/home/user/rt-watch-${randomBytes(4).toString("hex")}`;
  await sbx.files.makeDir(dir);
});
afterAll(async () => {
  await sbx?.files.remove(dir);
  await h?.close();
});

function has(events: FilesystemEvent[], type: FilesystemEventType, name: string) {
  return events.some((e) => e.type === type && e.name === name);
}

describe("watchDir", () => {
  it("reports a write to a file in the directory", async () => {
    const d = `${dir}/plain`;
    await sbx.files.write(`${d}/f.txt`, "one");
    const events: FilesystemEvent[] = [];
    const w = await sbx.files.watchDir(d, (e) => void events.push(e));
    await sbx.files.write(`${d}/f.txt`, "two");
    await expect.poll(() => has(events, FilesystemEventType.WRITE, "f.txt"), { timeout: 3000 }).toBe(true);
    await sbx.files.remove(`${d}/f.txt`);
    await expect.poll(() => has(events, FilesystemEventType.REMOVE, "f.txt"), { timeout: 3000 }).toBe(true);
    await w.stop();
  });

  it("reports chmod separately from writes", async () => {
    const d = `${dir}/chmod`;
    await sbx.files.write(`${d}/f.txt`, "x");
    const events: FilesystemEvent[] = [];
    const w = await sbx.files.watchDir(d, (e) => void events.push(e));
    await sbx.commands.run(`chmod 600 ${d}/f.txt`);
    await expect.poll(() => has(events, FilesystemEventType.CHMOD, "f.txt"), { timeout: 3000 }).toBe(true);
    expect(has(events, FilesystemEventType.WRITE, "f.txt")).toBe(false);
    await w.stop();
  });

  it("recursive: sees a new subdirectory and writes inside it, with entries", async () => {
    const d = `${dir}/rec`;
    await sbx.files.makeDir(d);
    const events: FilesystemEvent[] = [];
    const w = await sbx.files.watchDir(d, (e) => void events.push(e), { recursive: true, includeEntry: true });
    await sbx.files.makeDir(`${d}/nested`);
    await expect.poll(() => has(events, FilesystemEventType.CREATE, "nested"), { timeout: 3000 }).toBe(true);
    await sbx.files.write(`${d}/nested/f.txt`, "deep");
    await expect.poll(() => has(events, FilesystemEventType.WRITE, "nested/f.txt"), { timeout: 3000 }).toBe(true);
    const created = events.find((e) => e.name === "nested" && e.type === FilesystemEventType.CREATE)!;
    expect(created.entry).toMatchObject({ name: "nested", path: `${d}/nested`, type: "dir" });
    await w.stop();
  });

  it("missing directory is FileNotFoundError, a file is a SandboxError", async () => {
    await expect(sbx.files.watchDir(`${dir}/missing`, () => {})).rejects.toBeInstanceOf(FileNotFoundError);
    await sbx.files.write(`${dir}/afile`, "x");
    const err = await sbx.files.watchDir(`${dir}/afile`, () => {}).catch((e) => e);
    expect(err).toBeInstanceOf(SandboxError);
    expect(err).not.toBeInstanceOf(FileNotFoundError);
  });
});
