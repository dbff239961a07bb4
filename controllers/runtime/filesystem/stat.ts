import type { HandlerContext } from "@connectrpc/connect";
import type { StatRequest } from "../../../schema/envd/gen/filesystem/filesystem_pb.js";
import { fsError } from "../fs-errors.ts";
import { entryInfo } from "./entry-info.ts";
import { resolveRequestPath } from "./resolve.ts";

export async function stat(req: StatRequest, ctx: HandlerContext) {
  const r = resolveRequestPath(ctx, req.path, { followFinal: false });
  try {
    return { entry: await entryInfo(r.sbx, r.path, r.host) };
  } catch (err) {
    throw fsError(err, r.path, "stat");
  }
}
