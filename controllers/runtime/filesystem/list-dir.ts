import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { closeSync } from "node:fs";
import type { ListDirRequest } from "../../../schema/envd/gen/filesystem/filesystem_pb.js";
import { fsError } from "../fs-errors.ts";
import { errno, fdPath, openDirIn } from "../pinned-path.ts";
import { EntryNames, entryInfo } from "./entry-info.ts";
import { withRequestPath } from "./resolve.ts";
import { walk } from "./walk.ts";
import { MAX_TREE_DEPTH } from "./tree.ts";

/** Depth 0 is treated as 1. A symlinked root is followed and entries are reported under the
 * resolved directory, as envd does. */
export async function listDir(req: ListDirRequest, ctx: HandlerContext) {
  return withRequestPath(ctx, req.path, { want: "list" }, async (r) => {
    try {
      // The view has resolved every link already (its own way: a kernel realpath of a path
      // through `/proc/<pid>/root` would name the host's side of it); the directory itself is
      // opened without following a link swapped in since.
      const st = r.pinned.lstat();
      if (!st) throw errno("ENOENT", r.path);
      if (!st.isDirectory()) throw new ConnectError(`path '${r.path}' is not a directory`, Code.InvalidArgument);
      const prefix = r.pinned.sandboxPath === "/" ? "" : r.pinned.sandboxPath;
      const fd = openDirIn(r.pinned.dir, r.pinned.name);
      try {
        const names = new EntryNames(r.sbx);
        const entries = await walk(fdPath(fd), Math.min(Math.max(1, req.depth), MAX_TREE_DEPTH), (e) => entryInfo(r.sbx, `${prefix}/${e.rel}`, e.host, e.stats, names));
        return { entries };
      } finally {
        closeSync(fd);
      }
    } catch (err) {
      throw fsError(err, r.path, "list");
    }
  });
}
