// rm -r and cp -r over a tree the tenant shapes while the runtime (the host's root, under the
// local driver) works in it. Node's fs.rm and fs.cp walk by path string: a subdirectory swapped
// for `-> /etc` between their lstat and their readdir would have them empty or copy the host's
// /etc. Here every directory is opened without following it and its entries are named through
// that fd (pinned-path.ts): one fd per directory, held while its entries are handled.
import { closeSync, constants } from "node:fs";
import { copyFile, lchown, lstat, lutimes, mkdir, open, readdir, readlink, rmdir, symlink, unlink } from "node:fs/promises";
import { errno, fdPath, openDirIn, PathChangedError } from "../pinned-path.ts";

/** Levels below the named directory a walk goes: each holds its directory's fd while it works
 * below it, and the runtime's fds are every sandbox's (no path length stops a walk by fds). */
export const MAX_TREE_DEPTH = 256;

function tooDeep(): NodeJS.ErrnoException {
  return errno("ENAMETOOLONG", `a tree deeper than ${MAX_TREE_DEPTH} levels`);
}

/** `name` inside the pinned directory `dir`, and everything below it. ENOENT if it is not there. */
export async function removeTree(dir: string, name: string, level = 0): Promise<void> {
  const st = await lstat(`${dir}/${name}`);
  if (!st.isDirectory()) return unlink(`${dir}/${name}`);
  if (level >= MAX_TREE_DEPTH) throw tooDeep();
  let fd: number;
  try {
    fd = openDirIn(dir, name);
  } catch (err) {
    // Swapped for a link (or a file) since the lstat: remove that instead, never what it names.
    if (err instanceof PathChangedError || (err as NodeJS.ErrnoException).code === "ENOTDIR") return unlink(`${dir}/${name}`);
    throw err;
  }
  try {
    for (const child of await readdir(fdPath(fd))) {
      await removeTree(fdPath(fd), child, level + 1).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== "ENOENT") throw err;
      });
    }
  } finally {
    closeSync(fd);
  }
  await rmdir(`${dir}/${name}`);
}

/** `from` (in the pinned directory `fromDir`) copied to `to` (in `toDir`, which must not have
 * it) as `cp -a` would: links as links, modes, owners and times kept; sockets, FIFOs and device
 * nodes left out (what `mv` across file systems copies, minus what a tenant's tree should not
 * make the host's root open). */
export async function copyTree(fromDir: string, from: string, toDir: string, to: string, level = 0): Promise<void> {
  const src = `${fromDir}/${from}`;
  const dst = `${toDir}/${to}`;
  const st = await lstat(src);
  if (st.isSymbolicLink()) await symlink(await readlink(src), dst);
  else if (st.isFile()) {
    // The open file, not the name again: copyFile follows a final link.
    const fh = await open(src, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    try {
      if (!(await fh.stat()).isFile()) return;
      await copyFile(fdPath(fh.fd), dst, constants.COPYFILE_EXCL);
    } finally {
      await fh.close();
    }
  } else if (st.isDirectory()) {
    if (level >= MAX_TREE_DEPTH) throw tooDeep();
    await mkdir(dst, { mode: st.mode & 0o7777 });
    const s = openDirIn(fromDir, from);
    try {
      const d = openDirIn(toDir, to);
      try {
        for (const child of await readdir(fdPath(s))) await copyTree(fdPath(s), child, fdPath(d), child, level + 1);
      } finally {
        closeSync(d);
      }
    } finally {
      closeSync(s);
    }
  } else return;
  await lchown(dst, st.uid, st.gid);
  await lutimes(dst, st.atime, st.mtime);
}
