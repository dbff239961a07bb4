import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import type { MakeDirRequest } from "../../../schema/envd/gen/filesystem/filesystem_pb.js";
import { fsError } from "../fs-errors.ts";
import { entryInfo } from "./entry-info.ts";
import { mkdirsAs } from "./mkdirs.ts";
import { withRequestPath } from "./resolve.ts";

export async function makeDir(req: MakeDirRequest, ctx: HandlerContext) {
  return withRequestPath(ctx, req.path, { want: "none", create: true }, async (r) => {
    const existing = r.pinned.lstat();
    if (existing?.isDirectory()) throw new ConnectError(`directory '${r.path}' already exists`, Code.AlreadyExists);
    if (existing) throw new ConnectError(`path '${r.path}' already exists and is not a directory`, Code.InvalidArgument);
    try {
      await mkdirsAs(r.pinned, r.user, r.sbx.view, true);
      return { entry: await entryInfo(r.sbx, r.path, r.pinned.host) };
    } catch (err) {
      throw fsError(err, r.path, "create directory", true);
    }
  });
}
