// Applies image layers (tar, gzip or zstd) in order onto one directory, as a container runtime's
// snapshotter would, without ever writing outside it:
// - entries with `..`, and entries or hard links that would pass through a symlink already in the
//   tree (say `etc -> /etc` from a lower layer, then `etc/passwd`), fail the whole import (node-tar
//   refuses them; we turn its warnings into errors) instead of being half-applied;
// - absolute names are taken relative to the tree (`/etc/x` is `etc/x`, as Docker does);
// - symlinks are stored exactly as they are (`/lib/x` and `../../x` mean the sandbox's own root;
//   node-tar would strip or refuse them, so we make them ourselves after its pass) and are never
//   followed here: whiteouts, links and mode fix-ups walk the tree with lstat.
// Whiteouts (`.wh.<name>`, `.wh..wh..opq`) hide lower layers only, so each layer is read twice:
// first its whiteouts are applied to what is below, then its files are extracted.
import { chmodSync, lchownSync, lstatSync, lutimesSync, mkdirSync, readdirSync, rmSync, symlinkSync } from "node:fs";
import { join, posix } from "node:path";
import * as tar from "tar";

const WHITEOUT = ".wh.";
const OPAQUE = ".wh..wh..opq";

export interface FlattenLimits {
  /** Sum of the entries' sizes over all layers. */
  maxBytes: number;
  maxEntries: number;
}

export interface FlattenResult {
  entries: number;
  bytes: number;
  whiteouts: number;
  /** Device nodes, fifos and the like: a sandbox's /dev is made at start, never taken from an image. */
  skipped: string[];
}

export const DEFAULT_LIMITS: FlattenLimits = { maxBytes: 32 * 2 ** 30, maxEntries: 2_000_000 };

export class LayerError extends Error {}

/** `a/./b/`, `/a/b`, `./a/b` → `a/b`; undefined for `..` anywhere or the root itself. */
export function entryPath(name: string): string | undefined {
  const parts = name.split("/").filter((p) => p !== "" && p !== ".");
  if (parts.length === 0 || parts.includes("..")) return undefined;
  return parts.join("/");
}

/** The path of `rel` inside `tree` if every parent on the way is a real directory (no symlink),
 * undefined otherwise. The last component may be anything, or missing. */
export function pathInTree(tree: string, rel: string): string | undefined {
  const parts = rel.split("/");
  let at = tree;
  for (let i = 0; i < parts.length - 1; i++) {
    at = join(at, parts[i]!);
    try {
      if (!lstatSync(at).isDirectory()) return undefined;
    } catch {
      return undefined;
    }
  }
  return join(at, parts[parts.length - 1]!);
}

export async function flattenLayers(layers: string[], tree: string, limits: FlattenLimits = DEFAULT_LIMITS): Promise<FlattenResult> {
  const result: FlattenResult = { entries: 0, bytes: 0, whiteouts: 0, skipped: [] };
  mkdirSync(tree, { recursive: true });
  for (const [i, file] of layers.entries()) {
    const where = `layer ${i + 1} of ${layers.length}`;
    result.whiteouts += await applyWhiteouts(file, tree, where);
    await extract(file, tree, where, limits, result);
  }
  return result;
}

async function applyWhiteouts(file: string, tree: string, where: string): Promise<number> {
  const hide: { rel: string; opaque: boolean }[] = [];
  await tar.t({
    file,
    onReadEntry: (e) => {
      const rel = entryPath(e.path);
      if (!rel) return;
      const base = posix.basename(rel);
      const dir = posix.dirname(rel);
      if (base === OPAQUE) hide.push({ rel: dir, opaque: true });
      else if (base.startsWith(WHITEOUT)) hide.push({ rel: dir === "." ? base.slice(WHITEOUT.length) : `${dir}/${base.slice(WHITEOUT.length)}`, opaque: false });
    },
  });
  for (const { rel, opaque } of hide) {
    if (rel === "." && opaque) {
      for (const name of readdirSync(tree)) rmSync(join(tree, name), { recursive: true, force: true });
      continue;
    }
    const p = entryPath(rel) === undefined ? undefined : pathInTree(tree, rel);
    if (!p) continue; // nothing below to hide there (or a path we would not walk)
    if (!opaque) {
      rmSync(p, { recursive: true, force: true });
      continue;
    }
    let st;
    try {
      st = lstatSync(p);
    } catch {
      continue;
    }
    // Below it was a file or a symlink (never followed): this layer makes it a directory.
    if (!st.isDirectory()) {
      rmSync(p, { force: true });
      continue;
    }
    for (const name of readdirSync(p)) rmSync(join(p, name), { recursive: true, force: true });
  }
  return hide.length;
}

async function extract(file: string, tree: string, where: string, limits: FlattenLimits, result: FlattenResult): Promise<void> {
  const refused: string[] = [];
  const modes = new Map<string, number>(); // last entry for a path wins
  const links = new Map<string, Symlink>();
  await tar.x({
    file,
    cwd: tree,
    preserveOwner: process.getuid?.() === 0, // as root owners are the image's; otherwise the caller's
    chmod: true,
    processUmask: 0,
    onwarn: (code, message, data) => {
      const entry = (data as { entry?: { path?: string } }).entry?.path ?? "";
      if (code === "TAR_ENTRY_INFO") return; // e.g. a leading `/` stripped
      if (code === "TAR_ENTRY_UNSUPPORTED") result.skipped.push(entry);
      else refused.push(`${entry}: ${message}`);
    },
    filter: (path, entry) => {
      const rel = entryPath(path);
      const base = rel ? posix.basename(rel) : "";
      if (base.startsWith(WHITEOUT)) return false;
      result.entries++;
      result.bytes += "size" in entry ? (entry.size ?? 0) : 0;
      if (result.entries > limits.maxEntries || result.bytes > limits.maxBytes) {
        refused.push(`${path}: the image is larger than ${limits.maxEntries} entries or ${limits.maxBytes} bytes`);
        return false;
      }
      const type = "type" in entry ? entry.type : undefined;
      if (rel) {
        for (let d = posix.dirname(rel); d !== "."; d = posix.dirname(d)) {
          if (links.has(d)) {
            refused.push(`${path}: passes through the symlink ${d}`);
            return false;
          }
        }
        links.delete(rel);
      }
      if (type === "SymbolicLink" && "linkpath" in entry) {
        if (!rel || !entry.linkpath) refused.push(`${path}: not a symlink we can make`);
        else links.set(rel, { target: entry.linkpath, uid: entry.uid ?? 0, gid: entry.gid ?? 0, mtime: entry.mtime ?? new Date(0) });
        modes.delete(rel ?? "");
        return false;
      }
      if (rel && (type === "File" || type === "OldFile" || type === "ContiguousFile" || type === "Directory") && typeof entry.mode === "number") {
        modes.set(rel, entry.mode & 0o7777);
      }
      return true;
    },
  });
  if (refused.length > 0) throw new LayerError(`${where}: refused ${refused.length} entr${refused.length === 1 ? "y" : "ies"}: ${refused.slice(0, 5).join("; ")}`);
  fixModes(tree, modes);
  for (const [rel, link] of links) placeSymlink(tree, rel, link, where);
}

interface Symlink {
  target: string;
  uid: number;
  gid: number;
  mtime: Date;
}

/** Makes `rel` a symlink to exactly `target`, creating missing parents; replaces whatever was
 * there (a lower layer's file or directory). Refuses a parent that is not a real directory. */
function placeSymlink(tree: string, rel: string, link: Symlink, where: string): void {
  const parts = rel.split("/");
  let at = tree;
  for (const part of parts.slice(0, -1)) {
    at = join(at, part);
    try {
      if (!lstatSync(at).isDirectory()) throw new LayerError(`${where}: symlink ${rel}: ${part} on its way is not a directory`);
    } catch (err) {
      if (err instanceof LayerError) throw err;
      mkdirSync(at, 0o755);
    }
  }
  const p = join(at, parts[parts.length - 1]!);
  rmSync(p, { recursive: true, force: true });
  symlinkSync(link.target, p);
  if (process.getuid?.() === 0) lchownSync(p, link.uid, link.gid);
  lutimesSync(p, link.mtime, link.mtime);
}

/** The exact modes the layer asked for: files are created under the process umask, directories
 * get u+rwx while being filled, and chown clears set-id bits; chmod last, never through a link. */
function fixModes(tree: string, wanted: Map<string, number>): void {
  for (const [rel, mode] of wanted) {
    const p = pathInTree(tree, rel);
    if (!p) continue;
    let st;
    try {
      st = lstatSync(p);
    } catch {
      continue;
    }
    if (st.isSymbolicLink() || (st.mode & 0o7777) === mode) continue;
    chmodSync(p, mode);
  }
}
