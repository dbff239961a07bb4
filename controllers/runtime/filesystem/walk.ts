// ListDir's traversal: Go's filepath.WalkDir order (names sorted bytewise, depth first, each
// directory listed before its contents), the root itself excluded, symlinks not followed. Each
// subdirectory is opened without following it and its entries are named through that fd
// (pinned-path.ts), so one swapped for a link after its lstat is not descended into the host.
import { closeSync, type BigIntStats } from "node:fs";
import { lstat, readdir } from "node:fs/promises";
import { fdPath, openDirIn } from "../pinned-path.ts";

export interface WalkEntry {
  /** Path relative to the root, "/"-separated. */
  rel: string;
  stats: BigIntStats;
  /** The entry named through its directory's fd: valid only inside `each`. */
  host: string;
}

export function byteOrder(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a), Buffer.from(b));
}

/** lstat calls in flight per directory: libuv's thread pool (4 threads) works on several at once,
 * where one at a time left it idle between calls (a 2,000-entry listing was ~4x its floor). */
const LSTAT_BATCH = 64;

/** `each` runs for every entry while its directory is held open (its results in walk order);
 * `root` is a directory the caller has pinned. */
export async function walk<T = WalkEntry>(root: string, depth: number, each: (e: WalkEntry) => T | Promise<T> = (e) => e as T): Promise<T[]> {
  const out: Promise<T>[] = [];
  async function visit(dir: string, rel: string, level: number): Promise<void> {
    const names = (await readdir(dir)).sort(byteOrder);
    const mine: Promise<T>[] = [];
    try {
      for (let i = 0; i < names.length; i += LSTAT_BATCH) {
        const batch = names.slice(i, i + LSTAT_BATCH);
        const stats = await Promise.all(batch.map((name) => lstat(`${dir}/${name}`, { bigint: true })));
        for (let j = 0; j < batch.length; j++) {
          const name = batch[j]!;
          const childRel = rel ? `${rel}/${name}` : name;
          const done = Promise.resolve().then(() => each({ rel: childRel, stats: stats[j]!, host: `${dir}/${name}` }));
          // Awaited below and by the caller; a failure must not be an unhandled rejection before.
          done.catch(() => {});
          out.push(done);
          mine.push(done);
          if (!stats[j]!.isDirectory() || level >= depth) continue;
          let fd: number;
          try {
            fd = openDirIn(dir, name);
          } catch {
            continue; // gone, or no longer a directory, since its lstat
          }
          try {
            await visit(fdPath(fd), childRel, level + 1);
          } finally {
            closeSync(fd);
          }
        }
      }
    } finally {
      // This directory's entries are named through `dir`: done with them before its fd closes.
      await Promise.allSettled(mine);
    }
  }
  await visit(root, "", 1);
  return Promise.all(out);
}
