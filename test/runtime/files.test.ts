import { randomBytes } from "node:crypto";
import { get } from "node:http";
import { gunzipSync } from "node:zlib";
import { FileNotFoundError, InvalidArgumentError } from "e2b";
import { describe, expect, it } from "vitest";
import { startHarness, useSandboxWithDir } from "./support/harness.ts";

const fx = useSandboxWithDir("rt-files");

describe("write and read", () => {
  it("writes one file and returns a single entry with the absolute path", async () => {
    const name = `${fx.dir.slice("/home/user/".length)}/test_write.txt`;
    const info = await fx.sbx.files.write(name, "hello");
    expect(info).toMatchObject({ name: "test_write.txt", type: "file", path: `${fx.dir}/test_write.txt` });
    expect(await fx.sbx.files.read(name)).toBe("hello");
    await fx.sbx.files.write(name, "replaced");
    expect(await fx.sbx.files.read(`${fx.dir}/test_write.txt`)).toBe("replaced");
  });

  it("creates missing parent directories, owned by the user", async () => {
    await fx.sbx.files.write(`${fx.dir}/a/b/c.txt`, "deep");
    const parent = await fx.sbx.files.getInfo(`${fx.dir}/a/b`);
    expect(parent).toMatchObject({ type: "dir", owner: "user", group: "user", mode: 0o755 });
  });

  it("writes many files in one request, in request order, with mixed data types", async () => {
    const rel = fx.dir.slice("/home/user/".length);
    const res = await fx.sbx.files.write([
      { path: `${rel}/m1.txt`, data: "one" },
      { path: `${fx.dir}/m2.bin`, data: new Uint8Array([0, 1, 2, 255]).buffer },
      { path: `${fx.dir}/m3.txt`, data: new Blob(["three"]) },
    ]);
    expect(res.map((r) => r.path)).toEqual([`${fx.dir}/m1.txt`, `${fx.dir}/m2.bin`, `${fx.dir}/m3.txt`]);
    expect(await fx.sbx.files.read(`${fx.dir}/m2.bin`, { format: "bytes" })).toEqual(new Uint8Array([0, 1, 2, 255]));
    expect(await fx.sbx.files.write([])).toEqual([]);
  });

  it("round-trips binary and large files, also as streams", async () => {
    const data = randomBytes(5 * 1024 * 1024);
    await fx.sbx.files.write(`${fx.dir}/big.bin`, new Uint8Array(data).buffer);
    const back = await fx.sbx.files.read(`${fx.dir}/big.bin`, { format: "bytes" });
    expect(Buffer.from(back).equals(data)).toBe(true);

    const streamed = new Blob([data.subarray(0, 230 * 1024)]).stream();
    await fx.sbx.files.write(`${fx.dir}/streamed.bin`, streamed);
    const rs = await fx.sbx.files.read(`${fx.dir}/streamed.bin`, { format: "stream" });
    const got = Buffer.from(await new Response(rs).arrayBuffer());
    expect(got.equals(data.subarray(0, 230 * 1024))).toBe(true);
  });

  it("reads an empty file in every format", async () => {
    await fx.sbx.files.write(`${fx.dir}/empty.txt`, "");
    expect(await fx.sbx.files.read(`${fx.dir}/empty.txt`)).toBe("");
    expect(await fx.sbx.files.read(`${fx.dir}/empty.txt`, { format: "bytes" })).toEqual(new Uint8Array(0));
    expect((await fx.sbx.files.read(`${fx.dir}/empty.txt`, { format: "blob" })).size).toBe(0);
    const s = await fx.sbx.files.read(`${fx.dir}/empty.txt`, { format: "stream" });
    expect((await new Response(s).arrayBuffer()).byteLength).toBe(0);
  });

  it("gzip works in both directions", async () => {
    const text = "compress me ".repeat(1000);
    await fx.sbx.files.write(`${fx.dir}/gz.txt`, text, { gzip: true });
    expect(await fx.sbx.files.read(`${fx.dir}/gz.txt`)).toBe(text);
    expect(await fx.sbx.files.read(`${fx.dir}/gz.txt`, { gzip: true })).toBe(text);
  });

  it("gzips a download that compresses and sends one that does not as it is, unless identity is refused", async () => {
    const raw = (url: string, acceptEncoding: string) =>
      new Promise<{ encoding?: string; length?: string; body: Buffer }>((resolve, reject) => {
        get(url, { headers: { "accept-encoding": acceptEncoding } }, (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("end", () => resolve({ encoding: res.headers["content-encoding"], length: res.headers["content-length"], body: Buffer.concat(chunks) }));
        }).on("error", reject);
      });
    const random = randomBytes(1024 * 1024);
    const text = Buffer.from("a line that repeats\n".repeat(60_000));
    await fx.sbx.files.write(`${fx.dir}/random.bin`, new Uint8Array(random).buffer);
    await fx.sbx.files.write(`${fx.dir}/text.txt`, new Uint8Array(text).buffer);

    const plain = await raw(await fx.sbx.downloadUrl(`${fx.dir}/random.bin`), "gzip");
    expect(plain.encoding).toBeUndefined();
    expect(plain.length).toBe(String(random.length));
    expect(plain.body.equals(random)).toBe(true);

    const packed = await raw(await fx.sbx.downloadUrl(`${fx.dir}/text.txt`), "gzip");
    expect(packed.encoding).toBe("gzip");
    expect(packed.body.length).toBeLessThan(text.length / 10);
    expect(gunzipSync(packed.body).equals(text)).toBe(true);

    const forced = await raw(await fx.sbx.downloadUrl(`${fx.dir}/random.bin`), "gzip, identity;q=0");
    expect(forced.encoding).toBe("gzip");
    expect(gunzipSync(forced.body).equals(random)).toBe(true);
    // And through the SDK, which asks for gzip.
    expect(Buffer.from(await fx.sbx.files.read(`${fx.dir}/random.bin`, { format: "bytes", gzip: true })).equals(random)).toBe(true);
  });

  it("keeps metadata written with the file and returns it from getInfo and list", async () => {
    const w = await fx.sbx.files.write(`${fx.dir}/meta.txt`, "x", { metadata: { Owner: "team-a", kind: "report" } });
    expect(w.metadata).toEqual({ owner: "team-a", kind: "report" });
    expect((await fx.sbx.files.getInfo(`${fx.dir}/meta.txt`)).metadata).toEqual({ owner: "team-a", kind: "report" });
    await fx.sbx.files.write(`${fx.dir}/meta.txt`, "y");
    expect((await fx.sbx.files.getInfo(`${fx.dir}/meta.txt`)).metadata).toBeUndefined();
  });

  it("keeps metadata in user.e2b.* xattrs: set from inside, and kept by a new runtime", async () => {
    const f = `${fx.dir}/xattr.txt`;
    await fx.sbx.files.write(f, "x", { metadata: { stage: "raw" } });
    const seen = await fx.sbx.commands.run(`python3 -c "import os; print(os.getxattr('${f}', 'user.e2b.stage').decode())"`);
    expect(seen.stdout).toBe("raw\n");
    await fx.sbx.commands.run(`python3 -c "import os; os.setxattr('${f}', 'user.e2b.by', b'inside')"`);
    expect((await fx.sbx.files.getInfo(f)).metadata).toEqual({ stage: "raw", by: "inside" });
    // Another runtime (a restart) finds the same metadata on the file.
    const other = await startHarness();
    try {
      const sbx = await other.create();
      expect((await sbx.files.getInfo(f)).metadata).toEqual({ stage: "raw", by: "inside" });
      expect((await sbx.files.list(fx.dir)).find((e) => e.name === "xattr.txt")?.metadata).toEqual({ stage: "raw", by: "inside" });
    } finally {
      await other.close();
    }
  });

  it("reads kernel files that report a size of 0, and lists /", async () => {
    expect(await fx.sbx.files.read("/proc/self/status")).toMatch(/^Name:/m);
    expect((await fx.sbx.files.list("/")).map((e) => e.name)).toContain("proc");
  });

  it("reports a missing file as FileNotFoundError, also for streams", async () => {
    await expect(fx.sbx.files.read(`${fx.dir}/non_existing_file.txt`)).rejects.toBeInstanceOf(FileNotFoundError);
    await expect(fx.sbx.files.read(`${fx.dir}/non_existing_file.txt`, { format: "stream" })).rejects.toBeInstanceOf(FileNotFoundError);
  });

  it("refuses to read a directory or write over one", async () => {
    await expect(fx.sbx.files.read(fx.dir)).rejects.toThrow(/is a directory/);
    await expect(fx.sbx.files.write(fx.dir, "x")).rejects.toThrow(/is a directory/);
  });

  it("refuses a FIFO or a device node, read or written, without blocking (the runtime may be the host's root in the tenant's tree)", async () => {
    // A FIFO nobody reads held an open for writing (and one nobody writes, for reading) forever:
    // a thread of the runtime's pool each, four of them all of its file work.
    expect((await fx.sbx.commands.run(`mkfifo ${fx.dir}/fifo`)).exitCode).toBe(0);
    await expect(fx.sbx.files.write(`${fx.dir}/fifo`, "x")).rejects.toThrow(/is not a regular file/);
    await expect(fx.sbx.files.read(`${fx.dir}/fifo`)).rejects.toThrow(/is not a regular file/);
    // A character device (the sandbox's own /dev/null): read as a file it was empty; now refused.
    await expect(fx.sbx.files.read("/dev/null")).rejects.toThrow(/is not a regular file/);
    await expect(fx.sbx.files.write("/dev/null", "x", { user: "root" })).rejects.toThrow(/is not a regular file|permission denied/);
  });

  it("writes as another user when asked", async () => {
    await fx.sbx.files.write(`${fx.dir}/root-owned.txt`, "r", { user: "root" });
    expect((await fx.sbx.files.getInfo(`${fx.dir}/root-owned.txt`)).owner).toBe("root");
  });
});

describe("filesystem RPCs", () => {
  it("lists in WalkDir order with envd's entry fields", async () => {
    const root = `${fx.dir}/list`;
    await fx.sbx.files.write([
      { path: `${root}/file1.txt`, data: "abcd" },
      { path: `${root}/subdir1/a.txt`, data: "a" },
      { path: `${root}/subdir1/b.txt`, data: "b" },
      { path: `${root}/subdir2/c.txt`, data: "c" },
      { path: `${root}/subdir2/sub/d.txt`, data: "d" },
    ]);
    const depth1 = await fx.sbx.files.list(root);
    expect(depth1.map((e) => e.name)).toEqual(["file1.txt", "subdir1", "subdir2"]);
    expect(depth1[0]).toMatchObject({ type: "file", path: `${root}/file1.txt`, size: 4, mode: 0o644, permissions: "-rw-r--r--", owner: "user", group: "user" });
    expect(depth1[0]!.modifiedTime).toBeInstanceOf(Date);
    expect(depth1[1]).toMatchObject({ type: "dir", mode: 0o755, permissions: "drwxr-xr-x" });
    const depth2 = await fx.sbx.files.list(root, { depth: 2 });
    expect(depth2.map((e) => e.path.slice(root.length + 1))).toEqual([
      "file1.txt", "subdir1", "subdir1/a.txt", "subdir1/b.txt", "subdir2", "subdir2/c.txt", "subdir2/sub",
    ]);
    await expect(fx.sbx.files.list(root, { depth: -1 })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(fx.sbx.files.list(`${root}/file1.txt`)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(fx.sbx.files.list(`${root}/missing`)).rejects.toBeInstanceOf(FileNotFoundError);
  });

  it("names each listed entry's own owner and group, however many entries share them", async () => {
    // A listing looks each id up once (filesystem/entry-info.ts EntryNames): an entry must still
    // get its own owner and group, not its neighbour's, nor a uid's name for its gid.
    const root = `${fx.dir}/owners`;
    await fx.sbx.files.write([
      { path: `${root}/a-user.txt`, data: "u" },
      { path: `${root}/c-user.txt`, data: "u" },
    ]);
    await fx.sbx.files.write(`${root}/b-root.txt`, "r", { user: "root" });
    await fx.sbx.files.write(`${root}/d-mixed.txt`, "m", { user: "root" });
    expect((await fx.sbx.commands.run(`chown user:root ${root}/d-mixed.txt`, { user: "root" })).exitCode).toBe(0);
    const entries = await fx.sbx.files.list(root);
    expect(entries.map((e) => [e.name, e.owner, e.group])).toEqual([
      ["a-user.txt", "user", "user"],
      ["b-root.txt", "root", "root"],
      ["c-user.txt", "user", "user"],
      ["d-mixed.txt", "user", "root"],
    ]);
  });

  it("makeDir returns true, then false for an existing directory; nested paths are created", async () => {
    expect(await fx.sbx.files.makeDir(`${fx.dir}/mk/x/y`)).toBe(true);
    expect(await fx.sbx.files.makeDir(`${fx.dir}/mk/x/y`)).toBe(false);
    expect((await fx.sbx.files.getInfo(`${fx.dir}/mk/x`)).owner).toBe("user");
  });

  it("exists, getInfo and symlinks", async () => {
    expect(await fx.sbx.files.exists(`${fx.dir}/nope`)).toBe(false);
    await expect(fx.sbx.files.getInfo(`${fx.dir}/nope`)).rejects.toBeInstanceOf(FileNotFoundError);
    await fx.sbx.files.write(`${fx.dir}/target.txt`, "t");
    await fx.sbx.commands.run(`ln -s target.txt ${fx.dir}/link`);
    const link = await fx.sbx.files.getInfo(`${fx.dir}/link`);
    expect(link).toMatchObject({ name: "link", type: "file", symlinkTarget: `${fx.dir}/target.txt`, permissions: "Lrwxrwxrwx" });
    const rel = await fx.sbx.files.getInfo("target.txt".replace(/^/, `${fx.dir.slice("/home/user/".length)}/`));
    expect(rel.path).toBe(`${fx.dir}/target.txt`);
  });

  it("remove deletes and tolerates a missing path; rename moves and reports the destination", async () => {
    await fx.sbx.files.write(`${fx.dir}/rm.txt`, "x");
    await fx.sbx.files.remove(`${fx.dir}/rm.txt`);
    expect(await fx.sbx.files.exists(`${fx.dir}/rm.txt`)).toBe(false);
    await fx.sbx.files.remove(`${fx.dir}/rm.txt`);

    await fx.sbx.files.write(`${fx.dir}/from.txt`, "moved");
    const entry = await fx.sbx.files.rename(`${fx.dir}/from.txt`, `${fx.dir}/to/dest.txt`);
    expect(entry).toMatchObject({ name: "dest.txt", path: `${fx.dir}/to/dest.txt`, type: "file" });
    expect(await fx.sbx.files.read(`${fx.dir}/to/dest.txt`)).toBe("moved");
    await expect(fx.sbx.files.rename(`${fx.dir}/from.txt`, `${fx.dir}/x.txt`)).rejects.toBeInstanceOf(FileNotFoundError);
  });
});
