// mkdir -p where every directory it creates belongs to the acting user, as envd's EnsureDirs.
import { chown, mkdir } from "node:fs/promises";
import { posix } from "node:path";
import type { SandboxUser } from "../sandbox-view.ts";

export async function mkdirsAs(host: string, user: SandboxUser): Promise<void> {
  const first = await mkdir(host, { recursive: true, mode: 0o755 });
  if (!first) return;
  const rest = posix.relative(first, host);
  let cur = first;
  await chown(cur, user.uid, user.gid);
  for (const part of rest ? rest.split("/") : []) {
    cur = `${cur}/${part}`;
    await chown(cur, user.uid, user.gid);
  }
}
