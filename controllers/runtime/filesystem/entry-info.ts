// EntryInfo exactly as envd fills it: Lstat for the entry itself; for a symlink, type and mode
// come from the target and symlink_target is the target's absolute path. `hostPath` names the
// entry through its pinned directory (pinned-path.ts); nothing here follows its final name.
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { BigIntStats, Stats } from "node:fs";
import { lstat, readlink } from "node:fs/promises";
import { posix } from "node:path";
import { FileType, type EntryInfoSchema } from "../../../schema/envd/gen/filesystem/filesystem_pb.js";
import type { RuntimeSandbox } from "../sandbox.ts";
import { pinPath } from "../pinned-path.ts";
import { goModeString, permBits } from "./file-mode.ts";

export type EntryInit = MessageInitShape<typeof EntryInfoSchema>;

function fileType(s: { isFile(): boolean; isDirectory(): boolean; isSymbolicLink(): boolean }): FileType {
  if (s.isFile()) return FileType.FILE;
  if (s.isDirectory()) return FileType.DIRECTORY;
  if (s.isSymbolicLink()) return FileType.SYMLINK;
  return FileType.UNSPECIFIED;
}

/** Where the link leads as the sandbox resolves it, and what is there (a kernel realpath or stat
 * of the host path would follow it from the host's `/`). */
async function linkTarget(sbx: RuntimeSandbox, hostPath: string, sandboxPath: string): Promise<{ target: string; st?: Stats }> {
  let found: { target: string; st?: Stats } | undefined;
  try {
    const p = pinPath(sbx.view, sandboxPath);
    try {
      const st = p.lstat();
      // Still a link after the view followed it: dangling (a view that leaves it as written).
      if (!st?.isSymbolicLink()) found = { target: p.sandboxPath, st };
    } finally {
      p.close();
    }
  } catch {
    // Dangling through a missing directory, or a path the view refuses: as written, below.
  }
  if (found?.st) return found;
  // Dangling: report where it points, made absolute.
  const raw = await readlink(hostPath);
  return { target: posix.resolve(posix.dirname(sandboxPath), raw) };
}

/** Owner and group names by id, each looked up once per use of one of these: the standalone
 * runtime's view (HostView) re-checks /etc/passwd and /etc/group with a stat on every call, which
 * a 2,000-entry listing made 4,000 times for the same id or two, and a sandbox's view (LocalView:
 * a pin and an lstat at most once a second) still scans the parsed file per call. One is made per
 * request, so an edit of those files shows in the next one. */
export class EntryNames {
  readonly #users = new Map<number, string>();
  readonly #groups = new Map<number, string>();
  readonly #sbx: RuntimeSandbox;
  constructor(sbx: RuntimeSandbox) {
    this.#sbx = sbx;
  }

  owner(uid: number): string {
    let name = this.#users.get(uid);
    if (name === undefined) this.#users.set(uid, (name = this.#sbx.view.userName?.(uid) ?? String(uid)));
    return name;
  }

  group(gid: number): string {
    let name = this.#groups.get(gid);
    if (name === undefined) this.#groups.set(gid, (name = this.#sbx.view.groupName?.(gid) ?? String(gid)));
    return name;
  }
}

export async function entryInfo(sbx: RuntimeSandbox, sandboxPath: string, hostPath: string, lst?: BigIntStats, names = new EntryNames(sbx)): Promise<EntryInit> {
  const st = lst ?? (await lstat(hostPath, { bigint: true }));
  let type = fileType(st);
  let mode = permBits(Number(st.mode));
  let target: string | undefined;
  if (st.isSymbolicLink()) {
    const { target: to, st: t } = await linkTarget(sbx, hostPath, sandboxPath);
    target = to;
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
    owner: names.owner(uid),
    group: names.group(gid),
    modifiedTime: { seconds: st.mtimeNs / 1_000_000_000n, nanos: Number(st.mtimeNs % 1_000_000_000n) },
    symlinkTarget: target,
    metadata: await sbx.metadata.get(hostPath, st),
  };
}

/** The entry at a sandbox path (its final link not followed), pinned for the look. */
export async function entryAt(sbx: RuntimeSandbox, sandboxPath: string): Promise<EntryInit> {
  const p = pinPath(sbx.view, sandboxPath, { followFinal: false });
  try {
    return await entryInfo(sbx, sandboxPath, p.host);
  } finally {
    p.close();
  }
}
