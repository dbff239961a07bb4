import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import type { RemoveWatcherRequest } from "../../../schema/envd/gen/filesystem/filesystem_pb.js";
import { sandboxOf } from "../request-context.ts";

export function removeWatcher(req: RemoveWatcherRequest, ctx: HandlerContext) {
  const watchers = sandboxOf(ctx).watchers;
  const w = watchers.get(req.watcherId);
  if (!w) throw new ConnectError(`watcher '${req.watcherId}' not found`, Code.NotFound);
  w.close();
  watchers.delete(req.watcherId);
  return {};
}
