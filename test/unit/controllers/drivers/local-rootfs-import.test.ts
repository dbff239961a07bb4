// Importing templates from image files: synthetic OCI layouts and `docker save` tarballs built
// here (no registry), with whiteouts, opaque directories and hostile entries.
import { createHash } from "node:crypto";
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gzipSync, zstdCompressSync } from "node:zlib";
import { Header } from "tar";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { importImage } from "../../../../controllers/drivers/local/rootfs/image-import.ts";
import { RootfsStore } from "../../../../controllers/drivers/local/rootfs/store.ts";

type Entry =
  | { path: string; type: "File"; body?: string | Buffer; mode?: number; uid?: number }
  | { path: string; type: "Directory"; mode?: number }
  | { path: string; type: "SymbolicLink" | "Link"; linkpath: string };

/** A tar stream written header by header, so hostile names reach the importer unchanged. */
function tarOf(entries: Entry[]): Buffer {
  const blocks: Buffer[] = [];
  for (const e of entries) {
    const body = e.type === "File" ? Buffer.from(e.body ?? "") : Buffer.alloc(0); // copies a Buffer
    const h = new Header({
      path: e.path,
      type: e.type,
      size: body.length,
      mode: "mode" in e && e.mode !== undefined ? e.mode : e.type === "Directory" ? 0o755 : 0o644,
      uid: "uid" in e && e.uid !== undefined ? e.uid : 0,
      gid: "uid" in e && e.uid !== undefined ? e.uid : 0,
      mtime: new Date(1_700_000_000_000),
      linkpath: "linkpath" in e ? e.linkpath : undefined,
    });
    h.encode();
    blocks.push(h.block!, body, Buffer.alloc((512 - (body.length % 512)) % 512));
  }
  blocks.push(Buffer.alloc(1024));
  return Buffer.concat(blocks);
}

const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");

/** An OCI image layout directory with one manifest whose layers are `layers` (already encoded). */
function ociLayout(dir: string, layers: { data: Buffer; mediaType: string }[]): string {
  mkdirSync(join(dir, "blobs", "sha256"), { recursive: true });
  const put = (b: Buffer) => (writeFileSync(join(dir, "blobs", "sha256", sha(b)), b), `sha256:${sha(b)}`);
  const config = Buffer.from(JSON.stringify({ architecture: "amd64", os: "linux", rootfs: { type: "layers", diff_ids: [] } }));
  const manifest = Buffer.from(JSON.stringify({
    schemaVersion: 2,
    mediaType: "application/vnd.oci.image.manifest.v1+json",
    config: { mediaType: "application/vnd.oci.image.config.v1+json", digest: put(config), size: config.length },
    layers: layers.map((l) => ({ mediaType: l.mediaType, digest: put(l.data), size: l.data.length })),
  }));
  writeFileSync(join(dir, "oci-layout"), '{"imageLayoutVersion":"1.0.0"}');
  writeFileSync(join(dir, "index.json"), JSON.stringify({ schemaVersion: 2, manifests: [{ mediaType: "application/vnd.oci.image.manifest.v1+json", digest: put(manifest), size: manifest.length, platform: { os: "linux", architecture: "amd64" } }] }));
  return dir;
}

/** A legacy `docker save` tarball: <id>/layer.tar per layer and manifest.json naming them. */
function dockerSave(file: string, layers: Buffer[], layerPaths?: string[]): string {
  const paths = layerPaths ?? layers.map((_, i) => `${String(i).repeat(8)}/layer.tar`);
  const entries: Entry[] = [{ path: "manifest.json", type: "File", body: JSON.stringify([{ Config: "config.json", RepoTags: ["x:latest"], Layers: paths }]) }, { path: "config.json", type: "File", body: "{}" }];
  layers.forEach((l, i) => entries.push({ path: `${String(i).repeat(8)}/layer.tar`, type: "File", body: l }));
  writeFileSync(file, tarOf(entries));
  return file;
}

let work: string;
let store: RootfsStore;
let outside: string;
beforeEach(() => {
  work = mkdtempSync(join(tmpdir(), "rootfs-import-"));
  store = new RootfsStore(join(work, "store"));
  outside = join(work, "outside");
  mkdirSync(outside);
  writeFileSync(join(outside, "victim"), "untouched");
});
afterEach(() => rmSync(work, { recursive: true, force: true }));

const tree = (name: string) => store.templateTrees(name)![0]!;
const read = (name: string, p: string) => readFileSync(join(tree(name), p), "utf8");

function layeredImage() {
  const lower = tarOf([
    { path: "etc/", type: "Directory" },
    { path: "etc/os-release", type: "File", body: "ID=test\n" },
    { path: "etc/alt", type: "SymbolicLink", linkpath: join(outside, "victim") },
    { path: "usr/bin/tool", type: "File", body: "#!/bin/sh\n", mode: 0o4755 },
    { path: "usr/bin/tool2", type: "Link", linkpath: "usr/bin/tool" },
    { path: "bin", type: "SymbolicLink", linkpath: "usr/bin" },
    // As Debian has them: absolute targets, and `..` past the root (both mean the sandbox's `/`).
    { path: "lib", type: "SymbolicLink", linkpath: "usr/lib" },
    { path: "usr/lib/x86_64-linux-gnu/ld.so", type: "File", body: "ld" },
    { path: "lib64/ld-linux.so.2", type: "SymbolicLink", linkpath: "/lib/x86_64-linux-gnu/ld.so" },
    { path: "usr/lib/up", type: "SymbolicLink", linkpath: "../../../../etc/os-release" },
    { path: "tmp/", type: "Directory", mode: 0o1777 },
    { path: "home/user/.profile", type: "File", body: "x", mode: 0o600, uid: 1000 },
    { path: "opt/app/a", type: "File", body: "a" },
    { path: "opt/app/b", type: "File", body: "b" },
    { path: "var/cache/x/y", type: "File", body: "cache" },
  ]);
  const middle = tarOf([
    { path: "var/cache/.wh.x", type: "File" },
    // This layer's own file in the opaque dir stays, whichever comes first in the stream.
    { path: "opt/app/c", type: "File", body: "c" },
    { path: "opt/app/.wh..wh..opq", type: "File" },
    // A file over a lower symlink replaces the link: the link's target is never written.
    { path: "etc/alt", type: "File", body: "mine" },
  ]);
  const upper = tarOf([
    { path: "etc/.wh.os-release", type: "File" },
    { path: "etc/new", type: "File", body: "new" },
  ]);
  return { lower, middle, upper };
}

function expectLayered(name: string) {
  const t = tree(name);
  expect(existsSync(join(t, "etc/os-release"))).toBe(false);
  expect(read(name, "etc/new")).toBe("new");
  expect(readdirSync(join(t, "opt/app"))).toEqual(["c"]);
  expect(existsSync(join(t, "var/cache/x"))).toBe(false);
  expect(readdirSync(join(t, "var/cache"))).toEqual([]);
  expect(lstatSync(join(t, "etc/alt")).isFile()).toBe(true);
  expect(read(name, "etc/alt")).toBe("mine");
  expect(readFileSync(join(outside, "victim"), "utf8")).toBe("untouched");
  expect(readlinkSync(join(t, "bin"))).toBe("usr/bin");
  expect(readlinkSync(join(t, "lib64/ld-linux.so.2"))).toBe("/lib/x86_64-linux-gnu/ld.so");
  expect(readlinkSync(join(t, "usr/lib/up"))).toBe("../../../../etc/os-release");
  expect(statSync(join(t, "usr/bin/tool")).mode & 0o7777).toBe(0o4755);
  expect(statSync(join(t, "usr/bin/tool2")).ino).toBe(statSync(join(t, "usr/bin/tool")).ino);
  expect(statSync(join(t, "tmp")).mode & 0o7777).toBe(0o1777);
  expect(statSync(join(t, "home/user/.profile")).mode & 0o7777).toBe(0o600);
  if (process.getuid?.() === 0) expect(statSync(join(t, "home/user/.profile")).uid).toBe(1000);
}

describe("importing an image as a template rootfs", () => {
  it("flattens an OCI layout's gzip, plain and zstd layers in order, honouring whiteouts and opaque dirs", async () => {
    const { lower, middle, upper } = layeredImage();
    const dir = ociLayout(join(work, "oci"), [
      { data: gzipSync(lower), mediaType: "application/vnd.oci.image.layer.v1.tar+gzip" },
      { data: middle, mediaType: "application/vnd.oci.image.layer.v1.tar" },
      { data: zstdCompressSync(upper), mediaType: "application/vnd.oci.image.layer.v1.tar+zstd" },
    ]);
    const t = await importImage(store, dir, "myimage");
    expect(t.layers).toHaveLength(1);
    expectLayered("myimage");
    expect(store.templates().map((x) => x.name)).toEqual(["myimage"]);
    expect(store.manifest(t.layers[0]!)).toMatch(/^layer 1\tsha256:[0-9a-f]{64}\nlayer 2\t/);
    // The same image again reuses the layer.
    const again = await importImage(store, dir, "other");
    expect(again.layers).toEqual(t.layers);
  });

  it("imports a docker save tarball (legacy and Docker 25 forms) and an OCI layout packed as a tar file", async () => {
    const { lower, middle, upper } = layeredImage();
    await importImage(store, dockerSave(join(work, "saved.tar"), [gzipSync(lower), middle, upper]), "saved");
    expectLayered("saved");
    const dir = ociLayout(join(work, "oci"), [lower, middle, upper].map((data) => ({ data, mediaType: "application/vnd.oci.image.layer.v1.tar" })));
    // Docker 25's `docker save` is this layout plus a manifest.json naming the same blobs.
    const blobs = [lower, middle, upper].map((l) => `blobs/sha256/${sha(l)}`);
    writeFileSync(join(dir, "manifest.json"), JSON.stringify([{ Config: "x", RepoTags: ["x:1"], Layers: blobs }]));
    const files = ["oci-layout", "index.json", "manifest.json", ...readdirSync(join(dir, "blobs/sha256")).map((f) => `blobs/sha256/${f}`)];
    writeFileSync(join(work, "oci.tar"), tarOf(files.map((f) => ({ path: f, type: "File", body: readFileSync(join(dir, f)) }))));
    await importImage(store, join(work, "oci.tar"), "ocitar");
    expectLayered("ocitar");
  });

  it("refuses a `../` entry and registers nothing", async () => {
    const evil = tarOf([{ path: "ok", type: "File", body: "ok" }, { path: "../../outside/escaped", type: "File", body: "x" }]);
    const dir = ociLayout(join(work, "oci"), [{ data: evil, mediaType: "application/vnd.oci.image.layer.v1.tar" }]);
    await expect(importImage(store, dir, "evil")).rejects.toThrow(/layer 1 of 1: refused 1 entry: \.\.\/\.\.\/outside\/escaped/);
    expect(existsSync(join(outside, "escaped"))).toBe(false);
    expect(store.templates()).toEqual([]);
    expect(readdirSync(join(store.root, "layers"))).toEqual([]);
  });

  it("refuses writing through a symlink a lower layer planted, and a hard link out of the tree", async () => {
    const plant = tarOf([{ path: "evil", type: "SymbolicLink", linkpath: outside }]);
    const write = tarOf([{ path: "evil/pwned", type: "File", body: "x" }]);
    const dir = ociLayout(join(work, "oci"), [plant, write].map((data) => ({ data, mediaType: "application/vnd.oci.image.layer.v1.tar" })));
    await expect(importImage(store, dir, "evil")).rejects.toThrow(/layer 2 of 2: refused 1 entry: evil\/pwned/);
    expect(readdirSync(outside)).toEqual(["victim"]);
    // The same within one layer, and a symlink placed under a lower layer's symlink.
    const both = tarOf([{ path: "evil", type: "SymbolicLink", linkpath: outside }, { path: "evil/pwned", type: "File", body: "x" }]);
    const dir1 = ociLayout(join(work, "oci1"), [{ data: both, mediaType: "application/vnd.oci.image.layer.v1.tar" }]);
    await expect(importImage(store, dir1, "evil")).rejects.toThrow(/refused 1 entry: evil\/pwned: passes through the symlink evil/);
    const linkUnder = tarOf([{ path: "evil/pwned", type: "SymbolicLink", linkpath: "/x" }]);
    const dir3 = ociLayout(join(work, "oci3"), [plant, linkUnder].map((data) => ({ data, mediaType: "application/vnd.oci.image.layer.v1.tar" })));
    await expect(importImage(store, dir3, "evil")).rejects.toThrow(/symlink evil\/pwned: evil on its way is not a directory/);
    expect(readdirSync(outside)).toEqual(["victim"]);

    const link = tarOf([{ path: "passwd", type: "Link", linkpath: "../outside/victim" }]);
    const dir2 = ociLayout(join(work, "oci2"), [{ data: link, mediaType: "application/vnd.oci.image.layer.v1.tar" }]);
    await expect(importImage(store, dir2, "evil2")).rejects.toThrow(/refused 1 entry: passwd/);
    expect(statSync(join(outside, "victim")).nlink).toBe(1);
    expect(store.templates()).toEqual([]);
  });

  it("never deletes through a symlink when applying whiteouts", async () => {
    const plant = tarOf([{ path: "evil", type: "SymbolicLink", linkpath: outside }, { path: "evil2", type: "SymbolicLink", linkpath: outside }]);
    const hide = tarOf([{ path: "evil/.wh.victim", type: "File" }, { path: "evil2/.wh..wh..opq", type: "File" }, { path: "evil2/", type: "Directory" }, { path: "evil2/mine", type: "File", body: "m" }]);
    const dir = ociLayout(join(work, "oci"), [plant, hide].map((data) => ({ data, mediaType: "application/vnd.oci.image.layer.v1.tar" })));
    await importImage(store, dir, "hide");
    expect(readFileSync(join(outside, "victim"), "utf8")).toBe("untouched");
    expect(readlinkSync(join(tree("hide"), "evil"))).toBe(outside);
    expect(lstatSync(join(tree("hide"), "evil2")).isDirectory()).toBe(true);
    expect(readdirSync(join(tree("hide"), "evil2"))).toEqual(["mine"]);
  });

  it("ignores whiteouts that name `..` or `.` instead of deleting above the tree", async () => {
    const layer = tarOf([{ path: "keep", type: "File", body: "k" }, { path: ".wh...", type: "File" }, { path: "sub/.wh..", type: "File" }, { path: "sub/.wh...", type: "File" }]);
    const dir = ociLayout(join(work, "oci"), [layer, tarOf([{ path: ".wh...", type: "File" }])].map((data) => ({ data, mediaType: "application/vnd.oci.image.layer.v1.tar" })));
    await importImage(store, dir, "dots");
    expect(read("dots", "keep")).toBe("k");
    expect(readFileSync(join(outside, "victim"), "utf8")).toBe("untouched");
  });

  it("refuses image files that point outside the image or do not match their digest", async () => {
    const layer = tarOf([{ path: "a", type: "File", body: "a" }]);
    await expect(importImage(store, dockerSave(join(work, "bad.tar"), [layer], ["../outside/victim"]), "bad")).rejects.toThrow(/"\.\.\/outside\/victim" is (missing from|not a file inside) the image/);
    const dir = ociLayout(join(work, "oci"), [{ data: layer, mediaType: "application/vnd.oci.image.layer.v1.tar" }]);
    const blob = readdirSync(join(dir, "blobs/sha256")).find((f) => readFileSync(join(dir, "blobs/sha256", f)).equals(layer))!;
    rmSync(join(dir, "blobs/sha256", blob));
    symlinkSync(join(outside, "victim"), join(dir, "blobs/sha256", blob));
    await expect(importImage(store, dir, "bad")).rejects.toThrow(/is not a file inside the image/);
    rmSync(join(dir, "blobs/sha256", blob));
    writeFileSync(join(dir, "blobs/sha256", blob), tarOf([{ path: "b", type: "File", body: "b" }]));
    await expect(importImage(store, dir, "bad")).rejects.toThrow(/does not match its content/);
    await expect(importImage(store, dir, "Bad_Name")).rejects.toThrow(/template name "Bad_Name"/);
    expect(store.templates()).toEqual([]);
  });
});

describe("the template registry", () => {
  it("prunes layers no template names, keeping used ones and live builds", async () => {
    const layer = (body: string) => [{ data: tarOf([{ path: "f", type: "File", body }]), mediaType: "application/vnd.oci.image.layer.v1.tar" }];
    const a = await importImage(store, ociLayout(join(work, "a"), layer("a")), "one");
    const b = await importImage(store, ociLayout(join(work, "b"), layer("b")), "two");
    await importImage(store, ociLayout(join(work, "c"), layer("c")), "two"); // `two` now names a new layer
    const live = store.stagingDir("debian-x");
    const dead = join(store.root, "layers", ".build-debian-x-999999999-1");
    mkdirSync(dead);
    expect((await store.prune()).sort()).toEqual([".build-debian-x-999999999-1", b.layers[0]].sort());
    expect(store.layer(b.layers[0]!)).toBeUndefined();
    expect(store.layer(a.layers[0]!)).toBeDefined();
    expect(read("two", "f")).toBe("c");
    expect(existsSync(live)).toBe(true);
  });
});
