import type { HandlerContext } from "@connectrpc/connect";
import { cp, lstat, rename, rm } from "node:fs/promises";
import { posix } from "node:path";
import type { MoveRequest } from "../../../schema/envd/gen/filesystem/filesystem_pb.js";
import { fsError } from "../fs-errors.ts";
import { entryInfo } from "./entry-info.ts";
import { mkdirsAs } from "./mkdirs.ts";
import { resolveRequestPath } from "./resolve.ts";

export async function move(req: MoveRequest, ctx: HandlerContext) {
  const src = resolveRequestPath(ctx, req.source, { followFinal: false, want: "none" });
  const dst = resolveRequestPath(ctx, req.destination, { followFinal: false, want: "none" });
  try {
    await lstat(src.host);
  } catch (err) {
    throw fsError(err, src.path, "move");
  }
  try {
    await mkdirsAs(posix.dirname(dst.host), dst.user, dst.sbx.view);
    await rename(src.host, dst.host).catch(async (err: NodeJS.ErrnoException) => {
      // Across mounts rename fails; copy then delete, as mv does.
      if (err.code !== "EXDEV") throw err;
      await cp(src.host, dst.host, { recursive: true, preserveTimestamps: true, verbatimSymlinks: true });
      await rm(src.host, { recursive: true, force: true });
    });
    return { entry: await entryInfo(dst.sbx, dst.path, dst.host) };
  } catch (err) {
    throw fsError(err, dst.path, "move to");
  }
}
