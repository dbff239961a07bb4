// mkdir -p where every directory it creates belongs to the acting user, as envd's EnsureDirs.
// One mkdir per missing component (not Node's recursive mkdir, which reports a read-only file
// system as ENOENT), so a failure names its real cause as Go's MkdirAll does. Each is made inside
// the one above it held open and then opened without following it (pinned-path.ts): a directory
// swapped for a link in between fails the call instead of leading the chown (or the next mkdir)
// out of the sandbox.
import { closeSync, constants, fchownSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { openDirIn, type PinnedPath } from "../pinned-path.ts";
import type { SandboxUser, SandboxView } from "../sandbox-view.ts";

/** The ids a file created for `user` gets on the host (the view maps them when it has a user
 * namespace). */
export function ownerOnHost(view: Pick<SandboxView, "hostOwner">, user: SandboxUser): { uid: number; gid: number } {
  return view.hostOwner?.(user.uid, user.gid) ?? { uid: user.uid, gid: user.gid };
}

/** The directory `name` made (or found) in `dir` and given to `owner`: its fd, open for reading. */
function makeOne(dir: string, name: string, owner: { uid: number; gid: number }): Promise<number> {
  return mkdir(`${dir}/${name}`, { mode: 0o755 })
    .catch((err: NodeJS.ErrnoException) => {
      if (err.code !== "EEXIST") throw err;
    })
    .then(() => {
      const fd = openDirIn(dir, name, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
      try {
        fchownSync(fd, owner.uid, owner.gid);
      } catch (err) {
        closeSync(fd);
        throw err;
      }
      return fd;
    });
}

/** Makes `p`'s missing directories (and with `target`, the target itself), after which `p`
 * holds the deepest of them open. */
export async function mkdirsAs(p: PinnedPath, user: SandboxUser, view: Pick<SandboxView, "hostOwner">, target = false): Promise<void> {
  const owner = ownerOnHost(view, user);
  while (p.missing.length > 0) p.descend(await makeOne(p.dir, p.missing[0]!, owner));
  if (target) closeSync(await makeOne(p.dir, p.name, owner));
}
