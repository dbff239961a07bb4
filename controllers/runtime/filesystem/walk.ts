// ListDir's traversal: Go's filepath.WalkDir order (names sorted bytewise, depth first, each
// directory listed before its contents), the root itself excluded, symlinks not followed.
import type { BigIntStats } from "node:fs";
import { lstat, readdir } from "node:fs/promises";

export interface WalkEntry {
  /** Path relative to the root, "/"-separated. */
  rel: string;
  stats: BigIntStats;
}

export function byteOrder(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a), Buffer.from(b));
}

export async function walk(root: string, depth: number): Promise<WalkEntry[]> {
  const out: WalkEntry[] = [];
  async function visit(dir: string, rel: string, level: number): Promise<void> {
    const names = (await readdir(dir)).sort(byteOrder);
    for (const name of names) {
      const childRel = rel ? `${rel}/${name}` : name;
      const stats = await lstat(`${dir}/${name}`, { bigint: true });
      out.push({ rel: childRel, stats });
      if (stats.isDirectory() && level < depth) await visit(`${dir}/${name}`, childRel, level + 1);
    }
  }
  await visit(root, "", 1);
  return out;
}
