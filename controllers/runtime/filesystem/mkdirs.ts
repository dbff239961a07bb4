// mkdir -p where every directory it creates belongs to the acting user, as envd's EnsureDirs.
// One mkdir per missing component (not Node's recursive mkdir, which reports a read-only file
// system as ENOENT), so a failure names its real cause as Go's MkdirAll does.
import { chown, mkdir, stat } from "node:fs/promises";
import { posix } from "node:path";
import type { SandboxUser } from "../sandbox-view.ts";

export async function mkdirsAs(host: string, user: SandboxUser): Promise<void> {
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
    await chown(dir, user.uid, user.gid);
  }
}
