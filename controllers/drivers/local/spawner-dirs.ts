// The spawner's private directories (0700, in memory where possible: memoryTmpdir): its socket,
// the handover files of commands starting, helpers' scratch files. An agent that ends without
// disposing its driver (killed, or a test that stops it abruptly) leaves its directory behind,
// about twenty per CI run. Each name carries the owning process's pid, so a later agent removes
// the directories whose owner is gone and whose socket nobody listens on: never a live one (its
// owner runs, or its spawner answers on the socket). The base is /dev/shm, which every local user
// may write: only a real directory of this process's user counts (mkdtemp made it 0700), never a
// symlink or another user's directory named like one, which the agent (often root) would
// otherwise list, probe and remove on their say.
import { lstatSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { connect } from "node:net";
import { join } from "node:path";

const PREFIX = "kruise-spawner-";
/** `kruise-spawner-<pid>-<random>`; directories named before the pid was in the name are left alone. */
const OWNED = /^kruise-spawner-(\d+)-[A-Za-z0-9]+$/;
/** A socket that neither accepts nor refuses within this long counts as live. */
const PROBE_MS = 1_000;

/** A new private directory for this process's spawner, under `base`. */
export function makeSpawnerDir(base: string): string {
  return mkdtempSync(join(base, `${PREFIX}${process.pid}-`));
}

/**
 * Removes the spawner directories under `base` left by processes that are gone: the owner's pid
 * is not running (in this pid namespace), it is a directory of this user's (not a link), and no
 * socket in the directory accepts a connection.
 * Best effort: what cannot be read or removed stays. Answers the paths removed.
 */
export async function sweepSpawnerDirs(base: string): Promise<string[]> {
  let names: string[];
  try {
    names = readdirSync(base);
  } catch {
    return [];
  }
  const removed: string[] = [];
  for (const name of names) {
    const pid = Number(OWNED.exec(name)?.[1] ?? NaN);
    if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid || running(pid)) continue;
    const dir = join(base, name);
    try {
      const st = lstatSync(dir);
      if (!st.isDirectory() || st.uid !== process.getuid?.()) continue;
      const sockets = readdirSync(dir).filter((f) => f.endsWith(".sock"));
      if ((await Promise.all(sockets.map((s) => listening(join(dir, s))))).some(Boolean)) continue;
      rmSync(dir, { recursive: true, force: true });
      removed.push(dir);
    } catch {
      // gone meanwhile, or not ours to read: left alone
    }
  }
  return removed;
}

/** Whether a process with this pid exists (one of another user counts: EPERM). */
function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code !== "ESRCH";
  }
}

/** Whether something accepts connections on the Unix socket at `path` (no answer in time: yes). */
function listening(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(path);
    const done = (live: boolean) => {
      clearTimeout(timer);
      s.destroy();
      resolve(live);
    };
    const timer = setTimeout(() => done(true), PROBE_MS);
    s.once("connect", () => done(true));
    s.once("error", (err: NodeJS.ErrnoException) => done(err.code !== "ECONNREFUSED" && err.code !== "ENOENT"));
  });
}
