// Saves and restores a sandbox's writable layer as a tar file (GNU tar keeps owners, modes,
// links and sparse files; running it as root restores the sandbox user's ownership).
import { execFile } from "node:child_process";
import { mkdirSync, readdirSync, rmSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);
/** Layer directories; bind-mounted into a running sandbox, so they are emptied, never replaced. */
const LAYER_DIRS = ["home/user", "root", "tmp"];

export async function saveLayer(layer: string, file: string): Promise<number> {
  mkdirSync(dirname(file), { recursive: true });
  await run("tar", ["--create", "--sparse", "--numeric-owner", "--file", file, "--directory", layer, "."], { maxBuffer: 1 << 20 });
  return statSync(file).size;
}

/** `dirs` false: `layer` is a root's upper directory, emptied whole (its top-level directories
 * would otherwise hide the template's own, with their owners). */
export async function restoreLayer(layer: string, file: string, dirs = true): Promise<void> {
  if (!dirs) {
    mkdirSync(layer, { recursive: true });
    for (const name of readdirSync(layer)) rmSync(join(layer, name), { recursive: true, force: true });
  }
  for (const d of dirs ? LAYER_DIRS : []) {
    const dir = join(layer, d);
    mkdirSync(dir, { recursive: true });
    for (const name of readdirSync(dir)) rmSync(join(dir, name), { recursive: true, force: true });
  }
  await run("tar", ["--extract", "--same-permissions", "--numeric-owner", "--file", file, "--directory", layer], { maxBuffer: 1 << 20 });
}
