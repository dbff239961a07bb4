import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import type { GetWatcherEventsRequest } from "../../../schema/envd/gen/filesystem/filesystem_pb.js";
import { sandboxOf } from "../request-context.ts";
import { toFilesystemEvent } from "./watch-event.ts";

export async function getWatcherEvents(req: GetWatcherEventsRequest, ctx: HandlerContext) {
  const w = sandboxOf(ctx).watchers.get(req.watcherId);
  if (!w?.resolved) throw new ConnectError(`watcher '${req.watcherId}' not found`, Code.NotFound);
  const drained = w.pending.splice(0);
  const events = await Promise.all(drained.map((ev) => toFilesystemEvent(w.resolved!, ev, !!w.includeEntry)));
  return { events };
}
