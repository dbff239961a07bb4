// mkdir -p where every directory it creates belongs to the acting user, as envd's EnsureDirs.
// One mkdir per missing component (not Node's recursive mkdir, which reports a read-only file
// system as ENOENT), so a failure names its real cause as Go's MkdirAll does.
import { chown, mkdir, stat } from "node:fs/promises";
import { posix } from "node:path";
import type { SandboxUser, SandboxView } from "../sandbox-view.ts";

/** The ids a file created for `user` gets on the host (the view maps them when it has a user
 * namespace). */
export function ownerOnHost(view: Pick<SandboxView, "hostOwner">, user: SandboxUser): { uid: number; gid: number } {
  return view.hostOwner?.(user.uid, user.gid) ?? { uid: user.uid, gid: user.gid };
}

export async function mkdirsAs(host: string, user: SandboxUser, view: Pick<SandboxView, "hostOwner">): Promise<void> {
  const owner = ownerOnHost(view, user);
  const missing: string[] = [];
  let cur = host;
  while (!(await stat(cur).catch(() => undefined))) {
    missing.unshift(cur);
    const up = posix.dirname(cur);
    if (up === cur) break;
    cur = up;
  }
  for (const dir of missing) {
    await mkdir(dir, { mode: 0o755 }).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== "EEXIST") throw err;
    });
    await chown(dir, owner.uid, owner.gid);
  }
}
