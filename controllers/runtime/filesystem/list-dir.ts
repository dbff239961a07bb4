import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { stat } from "node:fs/promises";
import type { ListDirRequest } from "../../../schema/envd/gen/filesystem/filesystem_pb.js";
import { fsError } from "../fs-errors.ts";
import { entryInfo } from "./entry-info.ts";
import { resolveRequestPath } from "./resolve.ts";
import { walk } from "./walk.ts";

/** Depth 0 is treated as 1. A symlinked root is followed and entries are reported under the
 * resolved directory, as envd does. */
export async function listDir(req: ListDirRequest, ctx: HandlerContext) {
  const r = resolveRequestPath(ctx, req.path, { want: "list" });
  try {
    // The view has resolved every link already (its own way: a kernel realpath of a path through
    // `/proc/<pid>/root` would name the host's side of it).
    const root = r.host;
    if (!(await stat(root)).isDirectory()) throw new ConnectError(`path '${r.path}' is not a directory`, Code.InvalidArgument);
    const sandboxRoot = r.sbx.view.toSandbox(root);
    const prefix = sandboxRoot === "/" ? "" : sandboxRoot;
    const found = await walk(root, Math.max(1, req.depth));
    const entries = await Promise.all(found.map((e) => entryInfo(r.sbx, `${prefix}/${e.rel}`, `${root}/${e.rel}`, e.stats)));
    return { entries };
  } catch (err) {
    throw fsError(err, r.path, "list");
  }
}
