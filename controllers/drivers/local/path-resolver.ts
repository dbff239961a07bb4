// Resolves a sandbox path to a host path the way a process inside the sandbox would, without
// entering the sandbox: walk the path one component at a time over the mount table, and when a
// component is a symlink, restart from its target *as a sandbox path*. `..` at `/` stays at `/`,
// so no link can lead outside the table; kernel file systems (/proc, /dev, ...) and anything the
// table does not cover are refused. Known limit: a sandbox process that swaps a directory for a
// link between this walk and the runtime's use of the result can redirect that one operation
// (time-of-check/time-of-use); opening with O_NOFOLLOW/openat2 RESOLVE_IN_ROOT would close it.
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

/** The mount that serves `sandboxPath` (longest prefix), refusing paths the table does not own. */
export function mountOf(mounts: Mount[], sandboxPath: string): Mount {
  if (VIRTUAL_DIRS.some((v) => under(sandboxPath, v))) throw new PathOutsideSandboxError(sandboxPath);
  let best: Mount | undefined;
  for (const m of mounts) if (under(sandboxPath, m.at) && (!best || m.at.length > best.at.length)) best = m;
  if (!best) throw new PathOutsideSandboxError(sandboxPath);
  // Under the bare root only the skeleton's top-level entries exist (`/home`, the `/bin` link...).
  if (best.at === "/" && sandboxPath !== "/" && (sandboxPath.indexOf("/", 1) !== -1 || lstatLink(`${best.host}${sandboxPath}`) === undefined)) {
    throw new PathOutsideSandboxError(sandboxPath);
  }
  return best;
}

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

export function resolveSandboxPath(mounts: Mount[], path: string, followFinal = true): Resolved {
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
    const last = pending.every((p) => p === "" || p === ".");
    if (last && !followFinal) continue;
    const sandboxPath = `/${done.join("/")}`;
    const mount = mountOf(mounts, sandboxPath);
    const host = hostPathOf(mount, sandboxPath);
    if (lstatLink(host) !== true) continue;
    if (++links > MAX_LINKS) throw new PathOutsideSandboxError(path);
    const target = readlinkSync(host);
    done.pop();
    if (target.startsWith("/")) done = [];
    pending = [...target.split("/"), ...pending];
  }
  const sandboxPath = `/${done.join("/")}`;
  const mount = mountOf(mounts, sandboxPath);
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
