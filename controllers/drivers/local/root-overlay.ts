// A sandbox's `/` as a machine of its own: an overlayfs whose lower layers are its template's
// root filesystem (rootfs/store.ts, read-only and shared by every sandbox of the template) and
// whose upper and work directories are on the sandbox's own disk (disk.ts), or in its directory
// when it has none. Everything the sandbox writes anywhere lands in the upper directory, so it
// persists across a pause and an agent restart and goes with the disk at destroy.
//
// Mounted on the host (as root) at `<dataDir>/sandboxes/<id>/root`, and handed to bwrap as its
// root (`--bind <merged> /`): bubblewrap 0.8 has no overlay option, and an overlay mounted on `/`
// inside the namespaces after bwrap pivoted would not be the root its processes already hold.
// A host mount also outlives the agent as the disk's mount does, and lets the files API write
// to the sandbox's files at a host path. A Stop pause and destroy unmount it (before the disk).
import { chownSync, existsSync, lchownSync, lstatSync, mkdirSync, readdirSync, rmSync, symlinkSync, unlinkSync, writeFileSync } from "node:fs";
import { arch } from "node:os";
import { basename, dirname, join, relative } from "node:path";
import { TerminalError } from "../driver.ts";
import { isMounted, runHelper, unmountDisk } from "./disk.ts";
import { knownSyscallNumbers } from "./host-helpers.ts";
import { resolvConf, volatileBinds, volatileDir } from "./layout.ts";
import { unmountThenRemove } from "./remove-tree.ts";
import { RootfsStore, validTemplateName } from "./rootfs/store.ts";
import type { Spawner } from "./spawner.ts";
import { IDENTITY, idToHost, type IdMapping } from "./id-map.ts";
import { mountsUnder, unmountUnder, type IdmapMount, type OverlayMount } from "./userns.ts";

/** What a sandbox's record keeps of its root: the image and the layers it had at create, so a
 * template rebuilt later never changes the lower layers under an existing upper directory. */
export interface RootRecord {
  image: string;
  /** Layer ids, bottom first (as the store lists them). */
  layers: string[];
}

/** The template `base` is built by `npm start` in the background (minutes); until then sandboxes
 * of it get today's view of the host. Any other missing image is an error. */
export const HOST_VIEW_IMAGE = "base";

/** Chooses the root of a new sandbox of `image`: its template's layers, or undefined for the
 * host view (`base` not built yet). Throws TerminalError for an image that does not exist. */
export function rootFor(store: RootfsStore | undefined, image: string): RootRecord | undefined {
  if (!store) {
    if (image === HOST_VIEW_IMAGE) return undefined;
    throw new TerminalError("ImageNotFound", `image ${JSON.stringify(image)}: this agent has no root filesystems (only the host view of ${HOST_VIEW_IMAGE})`);
  }
  try {
    validTemplateName(image);
  } catch (err) {
    throw new TerminalError("InvalidSpec", `image ${JSON.stringify(image)} is not a root filesystem name: ${(err as Error).message}`);
  }
  const t = store.template(image);
  if (t && t.layers.length > 0 && t.layers.every((id) => store.layer(id))) return { image, layers: t.layers };
  if (image === HOST_VIEW_IMAGE) return undefined;
  throw new TerminalError("ImageNotFound", `image ${JSON.stringify(image)} does not exist in ${store.root} (templates: ${store.templates().map((x) => x.name).join(", ") || "none"})`);
}

/** overlayfs splits its options at commas and its lower layers at colons. */
function optionPath(p: string): string {
  if (/[,:\\\s]/.test(p)) throw new TerminalError("InvalidSpec", `overlay path ${JSON.stringify(p)} has a comma, colon, backslash or space, which mount options cannot carry`);
  return p;
}

export interface OverlayPaths {
  /** The sandbox's directory: the mount runs there, with paths relative to it. */
  dir: string;
  merged: string;
  upper: string;
  work: string;
}

/** Mounts the sandbox's root at `paths.merged` unless it is mounted (an agent restart finds it
 * so). Returns whether it is mounted for the first time (the identity files are written then). */
/** `idmap` makes the ID-mapped mounts asked for and then mounts the overlay (`overlay`) on them,
 * in the user namespace helper that makes them anyway (userns.pl): no `mount` process of its own. */
export async function mountRoot(spawner: Spawner, store: RootfsStore, root: RootRecord, paths: OverlayPaths, ids?: IdMapping, idmap?: (mounts: IdmapMount[], overlay: OverlayMount) => Promise<void>): Promise<boolean> {
  if (isMounted(paths.merged)) return false;
  // overlayfs shows its options, as given, in the sandbox's /proc/self/mountinfo: relative paths
  // from the sandbox's directory (`lowerdir=layers/0,upperdir=disk/upper`) name no host path, and
  // the lower layers are reached through links there. With a user namespace (`idmap`) they are
  // ID-mapped mounts of the layers instead (userns.ts): host root's files there show as the
  // sandbox's root, without a copy per sandbox.
  const links = join(paths.dir, "layers");
  // A new sandbox has no `layers` yet, so nothing below it to unmount (its mkdir is the look).
  if (!makeDir(links)) {
    await unmountUnder(spawner, links);
    rmSync(links, { recursive: true, force: true });
    mkdirSync(links);
  }
  const mounts: IdmapMount[] = [];
  const lower = root.layers.map((id, i) => {
    const tree = store.layerTree(id);
    if (!existsSync(tree)) throw new Error(`layer ${id} of image ${root.image} is gone from ${store.root} (pruned or rebuilt?)`);
    if (idmap) mounts.push({ source: tree, target: join(links, String(i)) });
    else symlinkSync(tree, join(links, String(i)));
    return `layers/${i}`;
  });
  // New sandbox: no work directory yet, so its mkdir makes one (a sandbox made from a snapshot
  // has an upper already, but gets an identity of its own all the same).
  const fresh = mkdirSync(paths.work, { recursive: true, mode: 0o700 }) !== undefined;
  mkdirSync(paths.upper, { recursive: true, mode: 0o755 });
  mkdirSync(paths.merged, { recursive: true });
  // The root directory's owner is the upper directory's: the sandbox's root, as the host sees it.
  if (ids) chownSync(paths.upper, ids.base, ids.base);
  const rel = (p: string) => optionPath(relative(paths.dir, p));
  // overlayfs lists lower layers top first.
  const options = `lowerdir=${lower.reverse().join(":")},upperdir=${rel(paths.upper)},workdir=${rel(paths.work)}`;
  if (idmap) await idmap(mounts, { dir: paths.dir, options, merged: paths.merged });
  // nodev, as userns.pl mounts it: no device node of the tenant's layers opens from the host side.
  else await runHelper(spawner, ["mount", "-t", "overlay", "overlay", "-o", `nodev,${options}`, paths.merged], paths.dir);
  return fresh;
}

/** mkdir of `dir`: true when made now, false when something is there already. */
function makeDir(dir: string): boolean {
  try {
    mkdirSync(dir);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw err;
  }
}

/** Unmounts the root as a disk is (lazily when something still holds a file in it: a namespace
 * being torn down). Idempotent. */
export async function unmountRoot(spawner: Spawner, merged: string): Promise<void> {
  await unmountDisk(spawner, merged);
  if (mayHoldMounts(join(dirname(merged), "layers"))) await unmountUnder(spawner, join(dirname(merged), "layers"));
}

/** Unmounts a sandbox's root, its ID-mapped layers and its disk (`disk`) with one `umount`
 * process, in that order (each is in use by the one before), where they were three or more; when
 * one of them is busy, what is left goes the one by one way (lazily where still busy). */
export async function unmountSandbox(spawner: Spawner, merged: string, disk: string): Promise<void> {
  const targets = sandboxMounts(merged, disk);
  if (targets.length > 1) {
    try {
      await runHelper(spawner, ["umount", ...targets]);
      return;
    } catch {
      // one was busy: the path below finds what is still mounted
    }
  }
  await unmountOneByOne(spawner, merged, disk);
}

/** What is mounted of a sandbox, in the order it unmounts: its root, its ID-mapped layers, the
 * tmpfs of its /dev/shm and /run, its disk. */
function sandboxMounts(merged: string, disk: string): string[] {
  const links = join(dirname(merged), "layers");
  const volatile = volatileDir(dirname(merged));
  // A mounted root stands on its layers, so its layer directories are mount points. An unmounted
  // one (a Stop pause leaves the empty directories) takes the mount table's word for them.
  const rooted = isMounted(merged);
  const layers = rooted ? layerMounts(links) : mayHoldMounts(links) ? mountsUnder(links) : [];
  return [...(rooted ? [merged] : []), ...layers, ...(isMounted(volatile) ? [volatile] : []), ...(isMounted(disk) ? [disk] : [])];
}

async function unmountOneByOne(spawner: Spawner, merged: string, disk: string): Promise<void> {
  await unmountRoot(spawner, merged);
  await unmountDisk(spawner, volatileDir(dirname(merged)));
  await unmountDisk(spawner, disk);
}

/** A destroy's unmount and deletion of the sandbox's directory `dir` (its `merged` and `disk`
 * below it), as one helper process where the sandbox has a disk: then all it wrote is in the
 * image, so the deletion is a few files and destroy may wait for it (remove-tree.ts
 * `unmountThenRemove`; a process and a fork of the spawner fewer per destroy). The image itself
 * holds what the tenant wrote (up to the disk's size): with `image`, the helper renames it to
 * `image.to` (the caller's trash) after the unmounts and the caller unlinks it in the background,
 * so destroy does not wait for that. Nothing is deleted before every mount is gone: a mount that
 * will not go leaves the directory whole, and what is left unmounts as unmountSandbox's fallback
 * does (lazily where busy; rejecting as it does). Answers whether `dir` is gone and whether the
 * image may be at `image.to`; when `dir` is not gone, the caller deletes it (its trash), as after
 * unmountSandbox. `cpu`: the host's (a CPU without the helper's syscall number takes
 * unmountSandbox's way). */
export async function unmountAndRemoveSandbox(spawner: Spawner, merged: string, disk: string, dir: string, image?: { from: string; to: string }, cpu: string = arch()): Promise<{ removed: boolean; moved: boolean }> {
  const targets = sandboxMounts(merged, disk);
  const umount2 = knownSyscallNumbers(cpu)?.umount2;
  // Without a disk the writable layer is a tree the tenant shaped, in `dir`: its deletion is not
  // waited for (the caller's trash).
  if (targets.at(-1) !== disk || umount2 === undefined) {
    if (targets.length > 0) await unmountSandbox(spawner, merged, disk);
    return { removed: false, moved: false };
  }
  const r = await unmountThenRemove(spawner, dir, targets, umount2, image);
  // The helper's first failure (a busy mount, or rm's "skipping ..., since it's on a different
  // device": a mount not in `targets`); what follows logs only its own.
  if (r.done !== "removed") console.warn(`destroy ${basename(dir)}: ${r.done}: ${JSON.stringify(r.why)}`);
  if (r.done === "not-unmounted") await unmountOneByOne(spawner, merged, disk);
  return { removed: r.done === "removed", moved: image !== undefined && r.done !== "not-unmounted" };
}

/** The ID-mapped layers' mount points below `links` of a mounted root, as its directories say
 * (mountRoot makes one directory per layer there and mounts it), not as the host's mount table
 * does: reading that is O(mounts on the host), and was ~0.9 ms of the agent's CPU per destroy with
 * 50 sandboxes up (the kernel's rendering of /proc/self/mountinfo, then its parse). Only what
 * mountRoot makes there is seen (a mount on a non-directory, or on `links` itself, is not; nothing
 * makes either). A directory there that is not mounted, or a mount below a layer, fails the one
 * `umount` of unmountSandbox, whose fallback then reads the table. Links (no user namespace) are
 * no mount points. */
function layerMounts(links: string): string[] {
  try {
    return readdirSync(links, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => join(links, e.name));
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "ENOENT" ? [] : mountsUnder(links);
  }
}

/** Whether anything can be mounted below `links` without reading the host's mount table
 * (O(mounts on the host), per sandbox): nothing can when it is missing (a sandbox whose root was
 * never mounted) or holds only symbolic links (the layers of a sandbox without a user namespace;
 * a mount point is a directory, and mountinfo names resolved paths). */
function mayHoldMounts(links: string): boolean {
  try {
    return readdirSync(links, { withFileTypes: true }).some((e) => !e.isSymbolicLink());
  } catch (err) {
    return (err as NodeJS.ErrnoException).code !== "ENOENT";
  }
}

/** The sandbox's own identity in its upper directory (through the mounted root): its hostname,
 * its hosts file, and the host's resolvers. Written once, when its root is new; the sandbox may
 * change them after. The tree under `merged` is the tenant's (its template's build steps, or a
 * snapshot of a sandbox it ran) and this runs as the host's root in the host's namespaces: a link
 * there is never followed (`/etc/hostname` -> `/etc/shadow` would have this overwrite the host's
 * file). So `/etc` must be a directory of its own (a link, file or node there is unlinked), and
 * each file is unlinked (a link or node itself; a whiteout over the layers) and created anew with
 * O_EXCL, which never follows a link. A directory where one of the files belongs is refused, not
 * deleted: its tree is the tenant's (any depth, any entry count, each removal a whiteout on the
 * sandbox's disk), and this runs on the agent's event loop. Nothing of the sandbox runs yet, so
 * nothing can race it. */
export function writeIdentity(merged: string, hostname: string, ids: IdMapping = IDENTITY): void {
  const etc = join(merged, "etc");
  const files: Record<string, string> = {
    hostname: `${hostname}\n`,
    hosts: `127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t${hostname}\n`,
    "resolv.conf": resolvConf(),
  };
  const found = lstatSync(etc, { throwIfNoEntry: false });
  // What is at each file's place, looked at once (nothing runs in the sandbox to change it).
  const there = new Map<string, boolean>();
  if (found?.isDirectory()) {
    for (const name of Object.keys(files)) {
      const st = lstatSync(join(etc, name), { throwIfNoEntry: false });
      if (st?.isDirectory()) throw new TerminalError("InvalidImage", `/etc/${name} is a directory in this sandbox's root (its template or snapshot made it one): it must be a file`);
      there.set(name, st !== undefined);
    }
  } else {
    if (found) unlinkSync(etc);
    mkdirSync(etc, { mode: 0o755 });
    lchownSync(etc, idToHost(ids, 0), idToHost(ids, 0));
  }
  for (const [name, text] of Object.entries(files)) {
    const path = join(etc, name);
    if (there.get(name)) unlinkSync(path);
    writeFileSync(path, text, { flag: "wx", mode: 0o644 });
    // Written by the host's root: owned by the sandbox's root, as the template's /etc is.
    lchownSync(path, idToHost(ids, 0), idToHost(ids, 0));
  }
}

/** bubblewrap arguments for a sandbox whose `/` is its overlay: the kernel file systems a Linux
 * machine has (its own /proc, a minimal /dev with a writable /dev/shm, a tmpfs /run: `volatile`,
 * layout.ts volatileBinds); /tmp is the root's own directory and persists, as on E2B's VM, whose
 * /tmp is on its root disk. */
export function bwrapRootArgs(merged: string, volatile?: string): string[] {
  return ["--bind", merged, "/", "--proc", "/proc", "--dev", "/dev", ...volatileBinds(volatile)];
}
