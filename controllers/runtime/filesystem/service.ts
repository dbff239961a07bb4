// filesystem.Filesystem: wiring only, one file per RPC.
import type { ConnectRouter } from "@connectrpc/connect";
import { Filesystem } from "../../../schema/envd/gen/filesystem/filesystem_pb.js";
import { createWatcher } from "./create-watcher.ts";
import { getWatcherEvents } from "./get-watcher-events.ts";
import { listDir } from "./list-dir.ts";
import { makeDir } from "./make-dir.ts";
import { move } from "./move.ts";
import { remove } from "./remove.ts";
import { removeWatcher } from "./remove-watcher.ts";
import { stat } from "./stat.ts";
import { watchDir } from "./watch-dir.ts";

export function filesystemService(router: ConnectRouter): void {
  router.service(Filesystem, { stat, makeDir, move, listDir, remove, watchDir, createWatcher, getWatcherEvents, removeWatcher });
}
