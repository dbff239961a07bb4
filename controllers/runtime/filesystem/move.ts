import type { HandlerContext } from "@connectrpc/connect";
import { rename } from "node:fs/promises";
import type { MoveRequest } from "../../../schema/envd/gen/filesystem/filesystem_pb.js";
import { fsError } from "../fs-errors.ts";
import { errno } from "../pinned-path.ts";
import { entryInfo } from "./entry-info.ts";
import { mkdirsAs } from "./mkdirs.ts";
import { withRequestPath } from "./resolve.ts";
import { copyTree, removeTree } from "./tree.ts";

export async function move(req: MoveRequest, ctx: HandlerContext) {
  return withRequestPath(ctx, req.source, { followFinal: false, want: "none" }, (src) => {
    if (!src.pinned.lstat()) throw fsError(errno("ENOENT", src.path), src.path, "move");
    return withRequestPath(ctx, req.destination, { followFinal: false, want: "none", create: true }, async (dst) => {
      try {
        await mkdirsAs(dst.pinned, dst.user, dst.sbx.view);
        // Both names inside their directories held open: rename follows neither.
        await rename(src.pinned.host, dst.pinned.host).catch(async (err: NodeJS.ErrnoException) => {
          // Across mounts rename fails; copy then delete, as mv does.
          if (err.code !== "EXDEV") throw err;
          // What rename would have replaced (a file, a link) goes first: the copy makes, never opens.
          if (dst.pinned.lstat()?.isDirectory() === false) await removeTree(dst.pinned.dir, dst.pinned.name);
          await copyTree(src.pinned.dir, src.pinned.name, dst.pinned.dir, dst.pinned.name);
          await removeTree(src.pinned.dir, src.pinned.name);
        });
        return { entry: await entryInfo(dst.sbx, dst.path, dst.pinned.host) };
      } catch (err) {
        throw fsError(err, dst.path, "move to", true);
      }
    });
  });
}
