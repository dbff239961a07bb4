// A sandbox made from another's snapshot gets that sandbox's files with the source's host ids:
// each sandbox's 0..65535 is a host range of its own (uid-range.ts), so without a shift the new
// sandbox would see every file as nobody. Before its first start (no process of it can race the
// walk), every entry's owner moves from the source's range to the new one's, as a container
// runtime shifts a rootfs. Symbolic links are never followed (lchown, lstat); the set-id bits a
// chown clears are put back.
import { lstat, lchown, chmod, readdir } from "node:fs/promises";
import { join } from "node:path";
import type { IdMapping } from "./id-map.ts";

/** The sandbox's nobody, for an id outside the source's range (the kernel shows it so). */
const NOBODY = 65534;

function shifted(id: number, from: IdMapping, to: IdMapping, resume: boolean): number {
  // A move cut short and run again: what is in the new range already moved.
  if (resume && id - to.base >= 0 && id - to.base < to.size) return id;
  const inside = id - from.base;
  return to.base + (inside >= 0 && inside < Math.min(from.size, to.size) ? inside : NOBODY);
}

/** Shifts the owners of `dir` and everything under it; answers how many entries it changed.
 * `resume`: ids already in `to` stay (a move from ids disjoint from `to` that may have been cut
 * short: from the host's own ids into a range, which starts above every id a sandbox maps). */
export async function shiftOwners(dir: string, from: IdMapping, to: IdMapping, resume = false): Promise<number> {
  if (from.base === to.base) return 0;
  let changed = 0;
  // A file with several names is shifted once: at its second name it is in the new range already,
  // which is outside the source's, and would become nobody.
  const seen = new Set<string>();
  const visit = async (path: string): Promise<void> => {
    const st = await lstat(path);
    if (st.nlink > 1 && !st.isDirectory()) {
      const key = `${st.dev}:${st.ino}`;
      if (seen.has(key)) return;
      seen.add(key);
    }
    const uid = shifted(st.uid, from, to, resume);
    const gid = shifted(st.gid, from, to, resume);
    if (uid !== st.uid || gid !== st.gid) {
      await lchown(path, uid, gid);
      // chown clears setuid/setgid on files (sudo reinstalled in the upper directory keeps them).
      if (!st.isSymbolicLink() && st.mode & 0o6000) await chmod(path, st.mode & 0o7777);
      changed++;
    }
    if (!st.isDirectory()) return;
    for (const name of await readdir(path)) await visit(join(path, name));
  };
  await visit(dir);
  return changed;
}
