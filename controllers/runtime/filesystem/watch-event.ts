// DirEvent → FilesystemEvent, with the entry when asked for and the path still exists.
import type { MessageInitShape } from "@bufbuild/protobuf";
import { EventType, type FilesystemEventSchema } from "../../../schema/envd/gen/filesystem/filesystem_pb.js";
import type { DirEvent } from "./dir-watcher.ts";
import { entryAt } from "./entry-info.ts";
import type { Resolved } from "./resolve.ts";

export async function toFilesystemEvent(r: Resolved, ev: DirEvent, includeEntry: boolean): Promise<MessageInitShape<typeof FilesystemEventSchema>> {
  const out: MessageInitShape<typeof FilesystemEventSchema> = { name: ev.name, type: ev.type };
  if (includeEntry && ev.type !== EventType.REMOVE && ev.type !== EventType.RENAME) {
    const base = r.path === "/" ? "" : r.path;
    // Looked up afresh (an event can wait in a polling watcher's queue for long).
    out.entry = await entryAt(r.sbx, `${base}/${ev.name}`).catch(() => undefined);
  }
  return out;
}
