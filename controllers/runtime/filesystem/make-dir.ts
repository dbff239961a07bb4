import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { lstat } from "node:fs/promises";
import type { MakeDirRequest } from "../../../schema/envd/gen/filesystem/filesystem_pb.js";
import { fsError } from "../fs-errors.ts";
import { entryInfo } from "./entry-info.ts";
import { mkdirsAs } from "./mkdirs.ts";
import { resolveRequestPath } from "./resolve.ts";

export async function makeDir(req: MakeDirRequest, ctx: HandlerContext) {
  const r = resolveRequestPath(ctx, req.path, { want: "none" });
  const existing = await lstat(r.host).catch(() => undefined);
  if (existing?.isDirectory()) throw new ConnectError(`directory '${r.path}' already exists`, Code.AlreadyExists);
  if (existing) throw new ConnectError(`path '${r.path}' already exists and is not a directory`, Code.InvalidArgument);
  try {
    await mkdirsAs(r.host, r.user, r.sbx.view);
    return { entry: await entryInfo(r.sbx, r.path, r.host) };
  } catch (err) {
    throw fsError(err, r.path, "create directory");
  }
}
