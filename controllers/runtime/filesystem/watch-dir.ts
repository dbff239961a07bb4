import type { HandlerContext } from "@connectrpc/connect";
import type { WatchDirRequest } from "../../../schema/envd/gen/filesystem/filesystem_pb.js";
import { withKeepalive } from "../event-stream.ts";
import type { DirEvent } from "./dir-watcher.ts";
import { openWatcher } from "./open-watcher.ts";
import { toFilesystemEvent } from "./watch-event.ts";

/** `start` once the watch is in place, then events until the client stops or the deadline. */
export async function* watchDir(req: WatchDirRequest, ctx: HandlerContext) {
  const early: DirEvent[] = [];
  let push: ((ev: DirEvent) => void) | undefined;
  const { r, watcher } = await openWatcher(ctx, req, (ev) => (push ? push(ev) : early.push(ev)));
  try {
    yield { event: { case: "start" as const, value: {} } };
    const source = {
      subscribe(p: (ev: DirEvent) => void) {
        push = p;
        for (const ev of early.splice(0)) p(ev);
        return () => watcher.close();
      },
    };
    for await (const ev of withKeepalive<DirEvent | "keepalive">(ctx, source, () => "keepalive")) {
      if (ev === "keepalive") yield { event: { case: "keepalive" as const, value: {} } };
      else yield { event: { case: "filesystem" as const, value: await toFilesystemEvent(r, ev, req.includeEntry) } };
    }
  } finally {
    watcher.close();
  }
}
