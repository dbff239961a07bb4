// Resolves a sandbox path to a host path the way a process inside the sandbox would, without
// entering the sandbox: walk the path one component at a time over the mount table, and when a
// component is a symlink, restart from its target *as a sandbox path*. `..` at `/` stays at `/`,
// so no link can lead outside the sandbox. With `root` (the sandbox's `/` as its holder sees it,
// `/proc/<holder>/root`), what the table does not cover (/opt, /proc, /dev, ...) is looked up
// there, component by component as well: the kernel's `/proc/<pid>/root` jump would follow an
// absolute link from the *host's* root, so no link is ever left to the kernel. Without `root`
// (no namespaces) such paths are refused. `/proc/self` names the caller; the runtime is not a
// process of the sandbox, so the sandbox's pid 1 stands in for it. The result is a path string:
// handed to the kernel as it is, a directory a sandbox process swaps for a link after this walk
// would be followed from the host's `/` (time-of-check/time-of-use). So the files API never uses
// it as it is: the view pins it (local-view.ts `pin`, runtime/pinned-path.ts), walking the
// result again from the mount's host directory or the holder's root with one fd per component,
// none followed, and resolving again here when a link turns up on the way. toHost's plain string
// is left to what only looks (a command's cwd, statfs, the user-access check's mode bits).
import { lstatSync, readlinkSync } from "node:fs";
import { PathOutsideSandboxError } from "../../runtime/sandbox-view.ts";
import { VIRTUAL_DIRS, type Mount } from "./layout.ts";

const MAX_LINKS = 40;

export interface Resolved {
  /** Normalised sandbox path with every link resolved (the final one only if followed). */
  sandboxPath: string;
  mount: Mount;
  hostPath: string;
}

function under(path: string, prefix: string): boolean {
  return prefix === "/" || path === prefix || path.startsWith(`${prefix}/`);
}

/** The mount that serves `sandboxPath` (longest prefix); what the table does not own is served
 * by `root` when given (read-only as far as the table knows), and refused otherwise. */
export function mountOf(mounts: Mount[], sandboxPath: string, root?: () => string): Mount {
  const outside = (): Mount => {
    if (!root) throw new PathOutsideSandboxError(sandboxPath);
    return { at: "/", host: root(), writable: false };
  };
  if (VIRTUAL_DIRS.some((v) => under(sandboxPath, v))) return outside();
  let best: Mount | undefined;
  for (const m of mounts) if (under(sandboxPath, m.at) && (!best || m.at.length > best.at.length)) best = m;
  if (!best) return outside();
  // Under the host view's bare root only the skeleton's top-level entries exist (`/home`, the
  // `/bin` link...); a sandbox's own root (writable) has everything.
  if (best.at === "/" && !best.writable && sandboxPath !== "/" && (sandboxPath.indexOf("/", 1) !== -1 || lstatLink(`${best.host}${sandboxPath}`) === undefined)) {
    return outside();
  }
  return best;
}

/** What `/proc/self` and `/proc/thread-self` stand for when the runtime looks (see above). */
const PROC_SELF: Record<string, string[]> = { self: ["proc", "1"], "thread-self": ["proc", "1", "task", "1"] };

export function hostPathOf(mount: Mount, sandboxPath: string): string {
  const rest = mount.at === "/" ? sandboxPath.slice(1) : sandboxPath.slice(mount.at.length + 1);
  return rest ? `${mount.host}/${rest}` : mount.host;
}

function lstatLink(host: string): boolean | undefined {
  try {
    return lstatSync(host).isSymbolicLink();
  } catch {
    return undefined;
  }
}

export function resolveSandboxPath(mounts: Mount[], path: string, followFinal = true, root?: () => string): Resolved {
  if (!path.startsWith("/")) throw new PathOutsideSandboxError(path);
  let pending = path.split("/");
  let done: string[] = [];
  let links = 0;
  while (pending.length > 0) {
    const part = pending.shift()!;
    if (part === "" || part === ".") continue;
    if (part === "..") {
      done.pop();
      continue;
    }
    done.push(part);
    if (root && done.length === 2 && done[0] === "proc" && PROC_SELF[part]) {
      done = [...PROC_SELF[part]!];
      continue;
    }
    const last = pending.every((p) => p === "" || p === ".");
    if (last && !followFinal) continue;
    const sandboxPath = `/${done.join("/")}`;
    const mount = mountOf(mounts, sandboxPath, root);
    const host = hostPathOf(mount, sandboxPath);
    if (lstatLink(host) !== true) continue;
    if (++links > MAX_LINKS) throw new PathOutsideSandboxError(path);
    const target = readlinkSync(host);
    done.pop();
    if (target.startsWith("/")) done = [];
    pending = [...target.split("/"), ...pending];
  }
  const sandboxPath = `/${done.join("/")}`;
  const mount = mountOf(mounts, sandboxPath, root);
  return { sandboxPath, mount, hostPath: hostPathOf(mount, sandboxPath) };
}

/** The sandbox path of a host path inside one of the mounts (the most specific one wins). */
export function sandboxPathOf(mounts: Mount[], hostPath: string): string {
  let best: Mount | undefined;
  for (const m of mounts) {
    if (m.at === "/") continue;
    if ((hostPath === m.host || hostPath.startsWith(`${m.host}/`)) && (!best || m.host.length > best.host.length)) best = m;
  }
  if (!best) {
    const root = mounts.find((m) => m.at === "/");
    if (root && (hostPath === root.host || hostPath.startsWith(`${root.host}/`))) {
      return hostPath === root.host ? "/" : hostPath.slice(root.host.length);
    }
    throw new PathOutsideSandboxError(hostPath);
  }
  const rest = hostPath.slice(best.host.length);
  return best.at === "/" ? rest || "/" : `${best.at}${rest}`;
}
