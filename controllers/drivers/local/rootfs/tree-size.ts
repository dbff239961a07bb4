// Bytes and entries of a directory tree, counted without following symlinks (hard links once).
import { lstat, readdir } from "node:fs/promises";
import { join } from "node:path";

export async function treeSize(dir: string): Promise<{ bytes: number; files: number }> {
  const seen = new Set<string>();
  let bytes = 0;
  let files = 0;
  const walk = async (d: string): Promise<void> => {
    for (const e of await readdir(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      const st = await lstat(p, { bigint: false });
      files++;
      if (st.nlink > 1 && !st.isDirectory()) {
        const k = `${st.dev}:${st.ino}`;
        if (seen.has(k)) continue;
        seen.add(k);
      }
      bytes += st.blocks * 512;
      if (st.isDirectory()) await walk(p);
    }
  };
  await walk(dir);
  return { bytes, files };
}
