// Imports a template from an OCI image layout (a directory, or a tar of one) or a `docker save`
// tarball: finds the image's layers in order, checks their digests, and flattens them into one
// read-only layer (see flatten.ts). No registry: images come as files.
import { createHash } from "node:crypto";
import { createReadStream, existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, statSync } from "node:fs";
import { join, sep } from "node:path";
import * as tar from "tar";
import { flattenLayers, LayerError, type FlattenLimits, DEFAULT_LIMITS } from "./flatten.ts";
import { RootfsStore, validTemplateName, type TemplateRecord } from "./store.ts";

const MAX_JSON = 4 << 20;
const MAX_LAYERS = 127;
const DIGEST = /^sha256:([a-f0-9]{64})$/;
const INDEX_TYPES = new Set(["application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json"]);
const LAYER_TYPES = new Set([
  "application/vnd.oci.image.layer.v1.tar",
  "application/vnd.oci.image.layer.v1.tar+gzip",
  "application/vnd.oci.image.layer.v1.tar+zstd",
  "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
  "application/vnd.docker.image.rootfs.diff.tar.gzip",
  "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
]);

export interface ImageLayers {
  format: "oci" | "docker-save";
  /** Absolute paths of the layer blobs, bottom first. */
  files: string[];
  /** sha256 of each layer blob as stored (compressed or not). */
  digests: string[];
}

type Log = (line: string) => void;

export async function importImage(store: RootfsStore, source: string, name: string, log: Log = () => {}, limits: FlattenLimits = DEFAULT_LIMITS): Promise<TemplateRecord> {
  validTemplateName(name);
  const started = Date.now();
  let unpacked: string | undefined;
  try {
    let dir = source;
    if (!statSync(source).isDirectory()) {
      mkdirSync(store.root, { recursive: true });
      unpacked = mkdtempSync(join(store.root, ".unpack-"));
      log(`unpacking ${source}`);
      await unpackOuter(source, unpacked);
      dir = unpacked;
    }
    const image = await readImageLayers(dir);
    const id = `oci-${createHash("sha256").update(image.digests.join("\n")).digest("hex").slice(0, 24)}`;
    if (!store.layer(id)) {
      const staging = store.stagingDir(id);
      try {
        log(`flattening ${image.files.length} layer(s) of a ${image.format} image`);
        const result = await flattenLayers(image.files, join(staging, "rootfs"), limits);
        const source = { format: image.format, layers: image.digests, whiteouts: result.whiteouts, skipped: result.skipped };
        const manifest = image.digests.map((d, i) => `layer ${i + 1}\tsha256:${d}\n`).join("");
        await store.commitLayer(staging, { id, kind: "oci", source }, started, manifest);
      } catch (err) {
        rmSync(staging, { recursive: true, force: true });
        throw err;
      }
    }
    return store.putTemplate(name, [id]);
  } finally {
    if (unpacked) rmSync(unpacked, { recursive: true, force: true });
  }
}

/** The outer archive holds JSON and blobs only; the same refusals as for layers apply. */
async function unpackOuter(file: string, into: string): Promise<void> {
  const refused: string[] = [];
  await tar.x({
    file,
    cwd: into,
    preserveOwner: false,
    onwarn: (code, message, data) => {
      if (code !== "TAR_ENTRY_INFO") refused.push(`${(data as { entry?: { path?: string } }).entry?.path ?? ""}: ${message}`);
    },
  });
  if (refused.length > 0) throw new LayerError(`image archive: refused ${refused.slice(0, 5).join("; ")}`);
}

/** Reads either format from an unpacked directory. Every path named inside must resolve (after
 * symlinks, which docker save uses between layer folders) to a regular file inside `dir`. */
export async function readImageLayers(dir: string): Promise<ImageLayers> {
  const root = realpathSync(dir);
  if (existsSync(join(root, "index.json"))) {
    const index = readJson(root, "index.json") as { manifests?: Descriptor[] };
    const manifest = pickManifest(root, index, 0);
    const layers = manifest.layers ?? [];
    if (!Array.isArray(layers) || layers.length === 0 || layers.length > MAX_LAYERS) throw new LayerError(`image manifest: 1-${MAX_LAYERS} layers expected`);
    const files: string[] = [];
    const digests: string[] = [];
    for (const l of layers) {
      if (!LAYER_TYPES.has(l.mediaType ?? "")) throw new LayerError(`layer media type ${JSON.stringify(l.mediaType)} is not supported`);
      const file = blob(root, l.digest);
      const hex = await sha256File(file);
      if (`sha256:${hex}` !== l.digest) throw new LayerError(`layer ${l.digest} does not match its content (sha256:${hex})`);
      files.push(file);
      digests.push(hex);
    }
    return { format: "oci", files, digests };
  }
  if (existsSync(join(root, "manifest.json"))) {
    const entries = readJson(root, "manifest.json") as { Layers?: unknown }[];
    if (!Array.isArray(entries) || entries.length === 0) throw new LayerError("manifest.json: no image in it");
    const layers = entries[0]!.Layers;
    if (!Array.isArray(layers) || layers.length === 0 || layers.length > MAX_LAYERS || !layers.every((l) => typeof l === "string")) {
      throw new LayerError(`manifest.json: Layers must be 1-${MAX_LAYERS} paths`);
    }
    const files = (layers as string[]).map((l) => inside(root, l));
    return { format: "docker-save", files, digests: await Promise.all(files.map(sha256File)) };
  }
  throw new LayerError("neither an OCI image layout (index.json) nor a docker save archive (manifest.json)");
}

interface Descriptor {
  mediaType?: string;
  digest?: string;
  platform?: { os?: string; architecture?: string };
  manifests?: Descriptor[];
  layers?: Descriptor[];
}

/** Follows an index to the linux/amd64 image manifest (or the only one). */
function pickManifest(root: string, index: Descriptor, depth: number): Descriptor {
  const ms = index.manifests;
  if (!Array.isArray(ms) || ms.length === 0) throw new LayerError("index.json: no manifests");
  if (depth > 3) throw new LayerError("index.json: indexes nested too deep");
  const chosen = ms.length === 1 ? ms[0]! : ms.find((m) => m.platform?.os === "linux" && m.platform?.architecture === "amd64");
  if (!chosen) throw new LayerError("index.json: no linux/amd64 manifest");
  const doc = JSON.parse(readBounded(blob(root, chosen.digest))) as Descriptor;
  if (INDEX_TYPES.has(chosen.mediaType ?? "") || (doc.manifests && !doc.layers)) return pickManifest(root, doc, depth + 1);
  return doc;
}

function blob(root: string, digest: unknown): string {
  const m = typeof digest === "string" ? DIGEST.exec(digest) : null;
  if (!m) throw new LayerError(`digest ${JSON.stringify(digest)} is not sha256:<64 hex>`);
  return inside(root, `blobs/sha256/${m[1]}`);
}

function inside(root: string, rel: string): string {
  let real: string;
  try {
    real = realpathSync(join(root, rel));
  } catch {
    throw new LayerError(`${JSON.stringify(rel)} is missing from the image`);
  }
  if (!real.startsWith(root + sep) || !statSync(real).isFile()) throw new LayerError(`${JSON.stringify(rel)} is not a file inside the image`);
  return real;
}

function readJson(root: string, rel: string): unknown {
  try {
    return JSON.parse(readBounded(inside(root, rel)));
  } catch (err) {
    if (err instanceof LayerError) throw err;
    throw new LayerError(`${rel}: ${(err as Error).message}`);
  }
}

function readBounded(file: string): string {
  if (statSync(file).size > MAX_JSON) throw new LayerError(`${file} is larger than ${MAX_JSON} bytes`);
  return readFileSync(file, "utf8");
}

function sha256File(file: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const h = createHash("sha256");
    createReadStream(file).on("error", reject).on("data", (c) => h.update(c)).on("end", () => resolve(h.digest("hex")));
  });
}
