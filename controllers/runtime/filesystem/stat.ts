import type { HandlerContext } from "@connectrpc/connect";
import type { StatRequest } from "../../../schema/envd/gen/filesystem/filesystem_pb.js";
import { fsError } from "../fs-errors.ts";
import { entryInfo } from "./entry-info.ts";
import { withRequestPath } from "./resolve.ts";

export async function stat(req: StatRequest, ctx: HandlerContext) {
  return withRequestPath(ctx, req.path, { followFinal: false }, async (r) => {
    try {
      return { entry: await entryInfo(r.sbx, r.path, r.pinned.host) };
    } catch (err) {
      throw fsError(err, r.path, "stat");
    }
  });
}
