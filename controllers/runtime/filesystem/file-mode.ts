// Go's os.FileMode as envd reports it: `mode` is the permission bits, `permissions` is
// FileMode.String() ("-rw-r--r--", "drwxr-xr-x", "Lrwxrwxrwx", "dtrwxrwxrwx", "Dcrw-rw-rw-").
import { constants } from "node:fs";

const { S_IFMT, S_IFDIR, S_IFLNK, S_IFIFO, S_IFSOCK, S_IFBLK, S_IFCHR, S_IFREG } = constants;
// Not exported by node:fs; fixed by POSIX.
const S_ISUID = 0o4000;
const S_ISGID = 0o2000;
const S_ISVTX = 0o1000;

export function permBits(mode: number): number {
  return mode & 0o777;
}

/** FileMode.String() for a POSIX st_mode. Type letters come in Go's order "dalTLDpSugct?". */
export function goModeString(mode: number): string {
  const fmt = mode & S_IFMT;
  let s = "";
  if (fmt === S_IFDIR) s += "d";
  if (fmt === S_IFLNK) s += "L";
  if (fmt === S_IFBLK || fmt === S_IFCHR) s += "D";
  if (fmt === S_IFIFO) s += "p";
  if (fmt === S_IFSOCK) s += "S";
  if (mode & S_ISUID) s += "u";
  if (mode & S_ISGID) s += "g";
  if (fmt === S_IFCHR) s += "c";
  if (mode & S_ISVTX) s += "t";
  if (![S_IFDIR, S_IFLNK, S_IFBLK, S_IFCHR, S_IFIFO, S_IFSOCK, S_IFREG].includes(fmt)) s += "?";
  if (!s) s = "-";
  const rwx = "rwxrwxrwx";
  for (let i = 0; i < 9; i++) s += mode & (1 << (8 - i)) ? rwx[i] : "-";
  return s;
}
