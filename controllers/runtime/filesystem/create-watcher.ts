import { randomUUID } from "node:crypto";
import type { HandlerContext } from "@connectrpc/connect";
import type { CreateWatcherRequest } from "../../../schema/envd/gen/filesystem/filesystem_pb.js";
import { openWatcher } from "./open-watcher.ts";

/** The polling form of WatchDir (the Python sync SDK uses it): events buffer until fetched. */
export async function createWatcher(req: CreateWatcherRequest, ctx: HandlerContext) {
  const { r, watcher } = await openWatcher(ctx, req);
  const watcherId = randomUUID();
  watcher.resolved = r;
  watcher.includeEntry = req.includeEntry;
  r.sbx.watchers.set(watcherId, watcher);
  return { watcherId };
}
