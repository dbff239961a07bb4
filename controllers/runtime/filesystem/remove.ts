import type { HandlerContext } from "@connectrpc/connect";
import type { RemoveRequest } from "../../../schema/envd/gen/filesystem/filesystem_pb.js";
import { fsError } from "../fs-errors.ts";
import { withRequestPath } from "./resolve.ts";
import { removeTree } from "./tree.ts";

/** rm -rf: a path that does not exist (nor its directory) is success. */
export async function remove(req: RemoveRequest, ctx: HandlerContext) {
  return withRequestPath(ctx, req.path, { followFinal: false, want: "none", create: true }, async (r) => {
    if (r.pinned.missing.length > 0) return {};
    try {
      await removeTree(r.pinned.dir, r.pinned.name);
      return {};
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return {};
      throw fsError(err, r.path, "remove");
    }
  });
}
