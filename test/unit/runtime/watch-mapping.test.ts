import { describe, expect, it } from "vitest";
import { classifyChange } from "../../../controllers/runtime/filesystem/dir-watcher.ts";
import { EventType } from "../../../schema/envd/gen/filesystem/filesystem_pb.js";

describe("classifyChange (fs.watch → envd event types)", () => {
  const st = (ctimeNs: bigint, mtimeNs: bigint) => ({ ctimeNs, mtimeNs });
  it.each([
    ["rename", st(5n, 5n), EventType.CREATE],
    ["rename", undefined, EventType.REMOVE],
    ["change", st(7n, 7n), EventType.WRITE],
    ["change", st(9n, 7n), EventType.CHMOD],
    ["change", undefined, EventType.REMOVE],
  ] as const)("%s with %o", (kind, stats, want) => {
    expect(classifyChange(kind, stats)).toBe(want);
  });
});
