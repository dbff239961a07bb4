import type { HandlerContext } from "@connectrpc/connect";
import { rm } from "node:fs/promises";
import type { RemoveRequest } from "../../../schema/envd/gen/filesystem/filesystem_pb.js";
import { fsError } from "../fs-errors.ts";
import { resolveRequestPath } from "./resolve.ts";

/** rm -rf: a path that does not exist is success. */
export async function remove(req: RemoveRequest, ctx: HandlerContext) {
  const r = resolveRequestPath(ctx, req.path, { followFinal: false, want: "none" });
  try {
    await rm(r.host, { recursive: true, force: true });
    return {};
  } catch (err) {
    throw fsError(err, r.path, "remove");
  }
}
