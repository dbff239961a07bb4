// EntryInfo exactly as envd fills it: Lstat for the entry itself; for a symlink, type and mode
// come from the target and symlink_target is the target's absolute path.
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { BigIntStats } from "node:fs";
import { lstat, readlink, realpath, stat } from "node:fs/promises";
import { posix } from "node:path";
import { FileType, type EntryInfoSchema } from "../../../schema/envd/gen/filesystem/filesystem_pb.js";
import type { RuntimeSandbox } from "../sandbox.ts";
import { goModeString, permBits } from "./file-mode.ts";

export type EntryInit = MessageInitShape<typeof EntryInfoSchema>;

function fileType(s: { isFile(): boolean; isDirectory(): boolean; isSymbolicLink(): boolean }): FileType {
  if (s.isFile()) return FileType.FILE;
  if (s.isDirectory()) return FileType.DIRECTORY;
  if (s.isSymbolicLink()) return FileType.SYMLINK;
  return FileType.UNSPECIFIED;
}

async function symlinkTarget(sbx: RuntimeSandbox, hostPath: string, sandboxPath: string): Promise<string> {
  try {
    return sbx.view.toSandbox(await realpath(hostPath));
  } catch {
    // Dangling (or escaping) link: report where it points, made absolute.
    const raw = await readlink(hostPath);
    return posix.resolve(posix.dirname(sandboxPath), raw);
  }
}

export async function entryInfo(sbx: RuntimeSandbox, sandboxPath: string, hostPath: string, lst?: BigIntStats): Promise<EntryInit> {
  const st = lst ?? (await lstat(hostPath, { bigint: true }));
  let type = fileType(st);
  let mode = permBits(Number(st.mode));
  let target: string | undefined;
  if (st.isSymbolicLink()) {
    target = await symlinkTarget(sbx, hostPath, sandboxPath);
    const t = await stat(hostPath).catch(() => undefined);
    type = t ? fileType(t) : FileType.UNSPECIFIED;
    mode = t ? permBits(t.mode) : 0;
  }
  const uid = Number(st.uid);
  const gid = Number(st.gid);
  return {
    name: sandboxPath === "/" ? "/" : posix.basename(sandboxPath),
    type,
    path: sandboxPath,
    size: st.size,
    mode,
    permissions: goModeString(Number(st.mode)),
    owner: sbx.view.userName?.(uid) ?? String(uid),
    group: sbx.view.groupName?.(gid) ?? String(gid),
    modifiedTime: { seconds: st.mtimeNs / 1_000_000_000n, nanos: Number(st.mtimeNs % 1_000_000_000n) },
    symlinkTarget: target,
    metadata: await sbx.metadata.get(hostPath, st),
  };
}
