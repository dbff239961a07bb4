// A sandbox path held open for one file operation, so a link a sandbox process swaps in after the
// path was resolved cannot send the operation out of the sandbox.
//
// Where the runtime is the host's root (the local driver), a host path string handed to the
// kernel is walked again at the moment of use, from the *host's* root: a directory the tenant
// turned into `d -> /etc` between resolution and `open(O_CREAT)` would have the agent create
// `/etc/x`. So a view resolves the path its own way (links restarted as sandbox paths), then
// walks the result from a trusted start (a mount's host directory, `/proc/<holder>/root`), one
// component at a time, each opened relative to the previous one's fd through
// `/proc/self/fd/<fd>/<name>` with O_NOFOLLOW: Linux jumps to the open directory and resolves
// the one name inside it, so no link is ever followed by the kernel. A link met on the way means
// the tree changed since resolution: the view resolves again (a few times), then gives up. The
// operation then names its target as `/proc/self/fd/<parent>/<name>` and never follows that final
// name (O_NOFOLLOW, lstat, mkdir, unlink, rename, l*xattr); directories below it are opened the
// same way (listDir, rm -r, a copy, a recursive watch), one fd per directory, never per entry.
import { closeSync, constants, lstatSync, openSync, type Stats } from "node:fs";
import { posix } from "node:path";
import type { PinOptions, SandboxView } from "./sandbox-view.ts";

/** Not in Node's fs.constants; the value on x86_64 and arm64 Linux. */
export const O_PATH = 0o10000000;
const DIR_FLAGS = O_PATH | constants.O_DIRECTORY | constants.O_NOFOLLOW;

/** The path through which the kernel reaches an open fd's file without walking any name. */
export function fdPath(fd: number): string {
  return `/proc/self/fd/${fd}`;
}

/** A link met where a directory was expected (a swap in progress): the view resolves again, and
 * after a few tries the operation fails as a path with too many links would (ELOOP: 400). */
export class PathChangedError extends Error {
  readonly code = "ELOOP";
  constructor(path: string) {
    super(`path ${path} changed while it was being opened`);
    this.name = "PathChangedError";
  }
}

/** An error as fs would throw it (fsError and the HTTP routes map it by `code`). */
export function errno(code: string, message: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`${code}: ${message}`), { code });
}

/** Opens `name` inside the directory `dir` (a pinned path) without following it: an fd of the
 * directory (O_PATH unless `flags` say otherwise), or a throw (ENOENT, ENOTDIR for a file,
 * PathChangedError for a link). */
export function openDirIn(dir: string, name: string, flags = DIR_FLAGS): number {
  try {
    return openSync(`${dir}/${name}`, flags);
  } catch (err) {
    // O_NOFOLLOW|O_DIRECTORY on a link answers ENOTDIR (ELOOP without O_DIRECTORY): tell a link
    // from a file.
    const code = (err as NodeJS.ErrnoException).code;
    if ((code === "ENOTDIR" || code === "ELOOP") && lstatSync(`${dir}/${name}`, { throwIfNoEntry: false })?.isSymbolicLink()) throw new PathChangedError(name);
    throw err;
  }
}

export class PinnedPath {
  /** The sandbox path with every link resolved (the final one only if followed). */
  readonly sandboxPath: string;
  /** The target's name in its directory ("." when the target is a start directory itself). */
  readonly name: string;
  /** Directories between `dir` and the target that do not exist (yet): only with `create`. */
  missing: string[];
  /** The target is a kernel file (procfs): a view that is the host's root lets it be read only
   * (local-view.ts `pin`); a write goes through no such pin (files-post.ts). */
  kernelFile = false;
  #fds: number[];

  constructor(sandboxPath: string, fds: number[], missing: string[], name: string) {
    this.sandboxPath = sandboxPath;
    this.#fds = fds;
    this.missing = missing;
    this.name = name;
  }

  /** `/proc/self/fd/<n>` of the deepest directory above the target held open. */
  get dir(): string {
    return fdPath(this.#fds.at(-1)!);
  }

  /** The target, as the operation names it. Only once its directories exist. */
  get host(): string {
    if (this.missing.length > 0) throw errno("ENOENT", `no such file or directory, '${this.sandboxPath}'`);
    // For a start directory itself, `/proc/self/fd/<n>/.`: the bare fd path is a link to lstat.
    return `${this.dir}/${this.name}`;
  }

  /** The target's lstat; undefined when it does not exist. */
  lstat(): Stats | undefined {
    return this.missing.length > 0 ? undefined : lstatSync(this.host, { throwIfNoEntry: false });
  }

  /** Holds `fd` (a directory just made or opened below `dir`) as the new `dir`. */
  descend(fd: number): void {
    this.#fds.push(fd);
    this.missing = this.missing.slice(1);
  }

  close(): void {
    for (const fd of this.#fds.splice(0)) closeSync(fd);
  }
}

/**
 * Walks `parts` (the target's host path below `start`, no `.`/`..`, every link already resolved
 * by the caller) from `start` (trusted: a directory the driver made, `/proc/<pid>/root`) without
 * following any of them. With `create`, a missing directory ends the walk and the rest is
 * `missing`; otherwise it is ENOENT. A link on the way throws PathChangedError.
 */
export function pinUnder(start: string, parts: string[], sandboxPath: string, create = false): PinnedPath {
  const fds = [openSync(start, O_PATH | constants.O_DIRECTORY)];
  try {
    const dirs = parts.slice(0, -1);
    for (let i = 0; i < dirs.length; i++) {
      try {
        fds.push(openDirIn(fdPath(fds.at(-1)!), dirs[i]!));
      } catch (err) {
        if (create && (err as NodeJS.ErrnoException).code === "ENOENT") return new PinnedPath(sandboxPath, fds, dirs.slice(i), parts.at(-1)!);
        throw err;
      }
    }
    return new PinnedPath(sandboxPath, fds, [], parts.at(-1) ?? ".");
  } catch (err) {
    for (const fd of fds) closeSync(fd);
    throw err;
  }
}

/** How many times a view resolves a path again when a link turns up on the way. */
export const PIN_ATTEMPTS = 8;

/** Resolves and pins, again while a link turns up where the resolution saw a directory. */
export function pinResolved(sandboxPath: string, attempt: () => { start: string; rest: string; sandboxPath: string }, create: boolean): PinnedPath {
  for (let i = 0; i < PIN_ATTEMPTS; i++) {
    const r = attempt();
    try {
      return pinUnder(r.start, r.rest.split("/").filter(Boolean), r.sandboxPath, create);
    } catch (err) {
      if (!(err instanceof PathChangedError)) throw err;
    }
  }
  throw new PathChangedError(sandboxPath);
}

/** A host path split for pinUnder from the host's `/` (views whose paths are the host's own). */
export function hostParts(host: string): { start: string; rest: string } {
  return { start: "/", rest: posix.normalize(host) };
}

/** The view's pin, or (a view without one) its toHost walked from the host's `/`. */
export function pinPath(view: SandboxView, sandboxPath: string, opts: PinOptions = {}): PinnedPath {
  if (view.pin) return view.pin(sandboxPath, opts);
  return pinResolved(
    sandboxPath,
    () => {
      const host = view.toHost(sandboxPath, opts);
      return { ...hostParts(host), sandboxPath: view.toSandbox(host) };
    },
    opts.create ?? false,
  );
}

/** The target's lstat as the sandbox resolves the path (its final link followed by the view, never
 * by the kernel), looked at through its pinned directory; undefined when the target does not exist.
 * Throws when a directory above it does not (ENOENT) or the path leaves the sandbox. A host path
 * string handed to stat would be walked again from the host's `/`: a link swapped in after the
 * view resolved it would have the answer tell the tenant about a host path. */
export function lstatPinned(view: SandboxView, sandboxPath: string): Stats | undefined {
  const p = pinPath(view, sandboxPath);
  try {
    return p.lstat();
  } finally {
    p.close();
  }
}
