import { randomBytes } from "node:crypto";
import { FileNotFoundError, InvalidArgumentError, type Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHarness, type Harness } from "./support/harness.ts";

let h: Harness;
let sbx: Sandbox;
/** Every test works under its own directory in /home/user, so runs do not collide. */
let dir: string;
beforeAll(async () => {
  h = await startHarness();
  sbx = await h.create();
  dir = `/home/user/rt-files-${randomBytes(4).toString("hex")}`;
  await sbx.files.makeDir(dir);
});
afterAll(async () => {
  await sbx?.files.remove(dir);
  await h?.close();
});

describe("write and read", () => {
  it("writes one file and returns a single entry with the absolute path", async () => {
    const name = `${dir.slice("/home/user/".length)}/test_write.txt`;
    const info = await sbx.files.write(name, "hello");
    expect(info).toMatchObject({ name: "test_write.txt", type: "file", path: `${dir}/test_write.txt` });
    expect(await sbx.files.read(name)).toBe("hello");
    await sbx.files.write(name, "replaced");
    expect(await sbx.files.read(`${dir}/test_write.txt`)).toBe("replaced");
  });

  it("creates missing parent directories, owned by the user", async () => {
    await sbx.files.write(`${dir}/a/b/c.txt`, "deep");
    const parent = await sbx.files.getInfo(`${dir}/a/b`);
    expect(parent).toMatchObject({ type: "dir", owner: "user", group: "user", mode: 0o755 });
  });

  it("writes many files in one request, in request order, with mixed data types", async () => {
    const rel = dir.slice("/home/user/".length);
    const res = await sbx.files.write([
      { path: `${rel}/m1.txt`, data: "one" },
      { path: `${dir}/m2.bin`, data: new Uint8Array([0, 1, 2, 255]).buffer },
      { path: `${dir}/m3.txt`, data: new Blob(["three"]) },
    ]);
    expect(res.map((r) => r.path)).toEqual([`${dir}/m1.txt`, `${dir}/m2.bin`, `${dir}/m3.txt`]);
    expect(await sbx.files.read(`${dir}/m2.bin`, { format: "bytes" })).toEqual(new Uint8Array([0, 1, 2, 255]));
    expect(await sbx.files.write([])).toEqual([]);
  });

  it("round-trips binary and large files, also as streams", async () => {
    const data = randomBytes(5 * 1024 * 1024);
    await sbx.files.write(`${dir}/big.bin`, new Uint8Array(data).buffer);
    const back = await sbx.files.read(`${dir}/big.bin`, { format: "bytes" });
    expect(Buffer.from(back).equals(data)).toBe(true);

    const streamed = new Blob([data.subarray(0, 230 * 1024)]).stream();
    await sbx.files.write(`${dir}/streamed.bin`, streamed);
    const rs = await sbx.files.read(`${dir}/streamed.bin`, { format: "stream" });
    const got = Buffer.from(await new Response(rs).arrayBuffer());
    expect(got.equals(data.subarray(0, 230 * 1024))).toBe(true);
  });

  it("reads an empty file in every format", async () => {
    await sbx.files.write(`${dir}/empty.txt`, "");
    expect(await sbx.files.read(`${dir}/empty.txt`)).toBe("");
    expect(await sbx.files.read(`${dir}/empty.txt`, { format: "bytes" })).toEqual(new Uint8Array(0));
    expect((await sbx.files.read(`${dir}/empty.txt`, { format: "blob" })).size).toBe(0);
    const s = await sbx.files.read(`${dir}/empty.txt`, { format: "stream" });
    expect((await new Response(s).arrayBuffer()).byteLength).toBe(0);
  });

  it("gzip works in both directions", async () => {
    const text = "compress me ".repeat(1000);
    await sbx.files.write(`${dir}/gz.txt`, text, { gzip: true });
    expect(await sbx.files.read(`${dir}/gz.txt`)).toBe(text);
    expect(await sbx.files.read(`${dir}/gz.txt`, { gzip: true })).toBe(text);
  });

  it("keeps metadata written with the file and returns it from getInfo and list", async () => {
    const w = await sbx.files.write(`${dir}/meta.txt`, "x", { metadata: { Owner: "team-a", kind: "report" } });
    expect(w.metadata).toEqual({ owner: "team-a", kind: "report" });
    expect((await sbx.files.getInfo(`${dir}/meta.txt`)).metadata).toEqual({ owner: "team-a", kind: "report" });
    await sbx.files.write(`${dir}/meta.txt`, "y");
    expect((await sbx.files.getInfo(`${dir}/meta.txt`)).metadata).toBeUndefined();
  });

  it("reports a missing file as FileNotFoundError, also for streams", async () => {
    await expect(sbx.files.read(`${dir}/non_existing_file.txt`)).rejects.toBeInstanceOf(FileNotFoundError);
    await expect(sbx.files.read(`${dir}/non_existing_file.txt`, { format: "stream" })).rejects.toBeInstanceOf(FileNotFoundError);
  });

  it("refuses to read a directory or write over one", async () => {
    await expect(sbx.files.read(dir)).rejects.toThrow(/is a directory/);
    await expect(sbx.files.write(dir, "x")).rejects.toThrow(/is a directory/);
  });

  it("writes as another user when asked", async () => {
    await sbx.files.write(`${dir}/root-owned.txt`, "r", { user: "root" });
    expect((await sbx.files.getInfo(`${dir}/root-owned.txt`)).owner).toBe("root");
  });
});

describe("filesystem RPCs", () => {
  it("lists in WalkDir order with envd's entry fields", async () => {
    const root = `${dir}/list`;
    await sbx.files.write([
      { path: `${root}/file1.txt`, data: "abcd" },
      { path: `${root}/subdir1/a.txt`, data: "a" },
      { path: `${root}/subdir1/b.txt`, data: "b" },
      { path: `${root}/subdir2/c.txt`, data: "c" },
      { path: `${root}/subdir2/sub/d.txt`, data: "d" },
    ]);
    const depth1 = await sbx.files.list(root);
    expect(depth1.map((e) => e.name)).toEqual(["file1.txt", "subdir1", "subdir2"]);
    expect(depth1[0]).toMatchObject({ type: "file", path: `${root}/file1.txt`, size: 4, mode: 0o644, permissions: "-rw-r--r--", owner: "user", group: "user" });
    expect(depth1[0]!.modifiedTime).toBeInstanceOf(Date);
    expect(depth1[1]).toMatchObject({ type: "dir", mode: 0o755, permissions: "drwxr-xr-x" });
    const depth2 = await sbx.files.list(root, { depth: 2 });
    expect(depth2.map((e) => e.path.slice(root.length + 1))).toEqual([
      "file1.txt", "subdir1", "subdir1/a.txt", "subdir1/b.txt", "subdir2", "subdir2/c.txt", "subdir2/sub",
    ]);
    await expect(sbx.files.list(root, { depth: -1 })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(sbx.files.list(`${root}/file1.txt`)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(sbx.files.list(`${root}/missing`)).rejects.toBeInstanceOf(FileNotFoundError);
  });

  it("makeDir returns true, then false for an existing directory; nested paths are created", async () => {
    expect(await sbx.files.makeDir(`${dir}/mk/x/y`)).toBe(true);
    expect(await sbx.files.makeDir(`${dir}/mk/x/y`)).toBe(false);
    expect((await sbx.files.getInfo(`${dir}/mk/x`)).owner).toBe("user");
  });

  it("exists, getInfo and symlinks", async () => {
    expect(await sbx.files.exists(`${dir}/nope`)).toBe(false);
    await expect(sbx.files.getInfo(`${dir}/nope`)).rejects.toBeInstanceOf(FileNotFoundError);
    await sbx.files.write(`${dir}/target.txt`, "t");
    await sbx.commands.run(`ln -s target.txt ${dir}/link`);
    const link = await sbx.files.getInfo(`${dir}/link`);
    expect(link).toMatchObject({ name: "link", type: "file", symlinkTarget: `${dir}/target.txt`, permissions: "Lrwxrwxrwx" });
    const rel = await sbx.files.getInfo("target.txt".replace(/^/, `${dir.slice("/home/user/".length)}/`));
    expect(rel.path).toBe(`${dir}/target.txt`);
  });

  it("remove deletes and tolerates a missing path; rename moves and reports the destination", async () => {
    await sbx.files.write(`${dir}/rm.txt`, "x");
    await sbx.files.remove(`${dir}/rm.txt`);
    expect(await sbx.files.exists(`${dir}/rm.txt`)).toBe(false);
    await sbx.files.remove(`${dir}/rm.txt`);

    await sbx.files.write(`${dir}/from.txt`, "moved");
    const entry = await sbx.files.rename(`${dir}/from.txt`, `${dir}/to/dest.txt`);
    expect(entry).toMatchObject({ name: "dest.txt", path: `${dir}/to/dest.txt`, type: "file" });
    expect(await sbx.files.read(`${dir}/to/dest.txt`)).toBe("moved");
    await expect(sbx.files.rename(`${dir}/from.txt`, `${dir}/x.txt`)).rejects.toBeInstanceOf(FileNotFoundError);
  });
});
