// Shared by WatchDir and CreateWatcher: the path must be an existing directory, and not on a
// network filesystem unless the client allowed it (inotify misses remote changes there).
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { readlinkSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { fsError } from "../fs-errors.ts";
import { errno, fdPath, openDirIn } from "../pinned-path.ts";
import { DirWatcher, type DirEvent } from "./dir-watcher.ts";
import { resolveRequestPath, type Resolved } from "./resolve.ts";

const NETWORK_FS = /^(nfs4?|cifs|smb[23]?|smbfs|fuse(\..+)?|sshfs|ceph|glusterfs|9p)$/;

export async function isNetworkMount(hostPath: string): Promise<boolean> {
  const mounts = await readFile("/proc/self/mounts", "utf8").catch(() => "");
  let best = { point: "", type: "" };
  for (const line of mounts.split("\n")) {
    const [, point, type] = line.split(" ");
    if (!point || !type) continue;
    const p = point.replace(/\\040/g, " ");
    const inside = p === "/" || hostPath === p || hostPath.startsWith(`${p}/`);
    if (inside && p.length >= best.point.length) best = { point: p, type };
  }
  return NETWORK_FS.test(best.type);
}

export interface WatchRequestLike {
  path: string;
  recursive: boolean;
  allowNetworkMounts: boolean;
}

export async function openWatcher(ctx: HandlerContext, req: WatchRequestLike, onEvent?: (ev: DirEvent) => void): Promise<{ r: Resolved; watcher: DirWatcher }> {
  const r = resolveRequestPath(ctx, req.path, { want: "list" });
  let fd: number;
  try {
    const st = r.pinned.lstat();
    if (!st) throw errno("ENOENT", r.path);
    if (!st.isDirectory()) throw new ConnectError(`path '${r.path}' is not a directory`, Code.InvalidArgument);
    // The watch and its lookups go through this fd, opened without following a link swapped in.
    fd = openDirIn(r.pinned.dir, r.pinned.name);
  } catch (err) {
    throw fsError(err, r.path, "watch");
  } finally {
    r.pinned.close();
  }
  const watcher = new DirWatcher(fd, req.recursive, onEvent);
  try {
    // The kernel's name for the directory, to find the mount it is on.
    if (!req.allowNetworkMounts && (await isNetworkMount(readlinkSync(fdPath(fd))))) {
      throw new ConnectError(`path '${r.path}' is on a network mount; set allowNetworkMounts to watch it`, Code.InvalidArgument);
    }
    await watcher.start();
  } catch (err) {
    watcher.close();
    throw fsError(err, r.path, "watch");
  }
  return { r, watcher };
}
