// Whether the acting user may read a path. The runtime opens files with its own rights (root on
// the host, for every sandbox it serves), so it checks the user's rights itself, from the mode
// bits the sandbox sees: search (x) on every directory on the way, then read (or read and search,
// to list) on the target. uid 0 passes. Writes are not checked: envd runs as root and writes
// anywhere, then gives the file to the user (E2B's `files.write('/opt/a')` as `user` works), so
// a write fails only where the file system refuses it (read-only, full). Supplementary groups
// are not consulted (the sandbox's users have only their primary group), so a file shared
// through one reads as denied.
import type { Stats } from "node:fs";
import { posix } from "node:path";
import { lstatPinned } from "./pinned-path.ts";
import type { SandboxUser, SandboxView } from "./sandbox-view.ts";

/** `none`: writes (see above); `reach`: search on the way only (stat). */
export type Want = "read" | "list" | "reach" | "none";

export class PermissionDeniedError extends Error {
  readonly path: string;
  constructor(path: string) {
    super(`permission denied`);
    this.path = path;
    this.name = "PermissionDeniedError";
  }
}

const R = 4;
const X = 1;

/** The pure rule: do `st`'s mode bits grant `bits` to `user`? */
export function grants(st: Pick<Stats, "mode" | "uid" | "gid">, user: Pick<SandboxUser, "uid" | "gid">, bits: number): boolean {
  if (user.uid === 0) return true;
  const cls = st.uid === user.uid ? (st.mode >> 6) & 7 : st.gid === user.gid ? (st.mode >> 3) & 7 : st.mode & 7;
  return (cls & bits) === bits;
}

/** The path's mode bits as the sandbox resolves it (lstatPinned); undefined when it cannot be
 * looked at. */
function statOf(view: SandboxView, sandboxPath: string): Stats | undefined {
  try {
    return lstatPinned(view, sandboxPath);
  } catch {
    return undefined;
  }
}

/** Throws PermissionDeniedError when `user` may not do `want` at `target` (a sandbox path with its
 * links resolved). A missing path is left to the operation (it answers not_found itself). */
export function checkAccess(view: SandboxView, user: SandboxUser, target: string, want: Want): void {
  if (user.uid === 0 || want === "none") return;
  let existing = target;
  let st = statOf(view, target);
  while (!st && existing !== "/") {
    existing = posix.dirname(existing);
    st = statOf(view, existing);
  }
  // Search permission on every directory above the deepest one that exists.
  const parts = existing.split("/").filter(Boolean);
  for (let i = 0; i < parts.length; i++) {
    const d = statOf(view, `/${parts.slice(0, i).join("/")}`);
    if (d && !grants(d, user, X)) throw new PermissionDeniedError(target);
  }
  if (!st || existing !== target) return;
  const need = want === "read" ? R : want === "list" ? (st.isDirectory() ? R | X : R) : 0;
  if (need && !grants(st, user, need)) throw new PermissionDeniedError(target);
}
