// One agent per data dir. Two agents on one (two `npm start`s, the kube tier beside a local one)
// would both adopt and reconcile the same holders, disks and intents. Each agent holds an
// exclusive flock(2) on `<data dir>/agent.lock` for its life: the kernel drops it when the
// process ends however it ends (a crash, SIGKILL), so a stale lock file never blocks a start, and
// a second agent is refused at once, naming the first's pid (written into the file once locked).
//
// Node has no flock; flock(1) takes it on a descriptor this process opened and hands over as its
// fd 3. A flock belongs to the open file description, not to the process that asked for it, so it
// stays with this process's descriptor after flock(1) exits, until that descriptor is closed
// (release, or the process's end). The descriptor is close-on-exec (Node opens every file so):
// no helper, holder or command this agent starts holds it, so none can outlive the agent holding
// the lock.
import { spawnSync } from "node:child_process";
import { closeSync, constants, ftruncateSync, mkdirSync, openSync, readSync, writeSync } from "node:fs";
import { join } from "node:path";
import { helperEnv } from "../drivers/local/host-helpers.ts";

export const LOCK_FILE = "agent.lock";
/** flock(1)'s exit code when the lock is held elsewhere (--conflict-exit-code). */
const HELD = 75;

export class DataDirInUseError extends Error {
  readonly dataDir: string;
  /** The holder's pid, as it wrote it (undefined: not written yet). */
  readonly pid: number | undefined;
  constructor(dataDir: string, pid: number | undefined) {
    super(`data dir ${dataDir} is in use by another agent (pid ${pid ?? "unknown"}): stop it, or give this one another --data-dir`);
    this.dataDir = dataDir;
    this.pid = pid;
  }
}

export interface DataDirLock {
  /** Lets the next agent start (the agent's stop). Idempotent. */
  release(): void;
}

/** Takes the data dir's lock, or throws DataDirInUseError when another live process holds it. */
export function lockDataDir(dataDir: string): DataDirLock {
  mkdirSync(dataDir, { recursive: true });
  const file = join(dataDir, LOCK_FILE);
  // O_NOFOLLOW: the file is the agent's own; a link planted there is refused, not followed.
  const fd = openSync(file, constants.O_RDWR | constants.O_CREAT | constants.O_NOFOLLOW, 0o600);
  let held = false;
  try {
    const r = spawnSync("flock", ["--nonblock", "--exclusive", "--conflict-exit-code", String(HELD), "3"], { stdio: ["ignore", "ignore", "pipe", fd], env: helperEnv(), encoding: "utf8" });
    if (r.status === HELD) throw new DataDirInUseError(dataDir, holderPid(fd));
    if (r.error || r.status !== 0) throw new Error(`cannot lock ${file}: ${r.error?.message ?? (r.stderr.trim() || `flock exited ${r.status ?? r.signal}`)}`);
    ftruncateSync(fd, 0);
    writeSync(fd, `${process.pid}\n`, 0);
    held = true;
  } finally {
    if (!held) closeSync(fd);
  }
  let open = true;
  return {
    release() {
      if (open) closeSync(fd);
      open = false;
    },
  };
}

/** The pid the holder wrote. It writes it just after it locked: a start at that instant may read
 * nothing yet (the message then says so). */
function holderPid(fd: number): number | undefined {
  const buf = Buffer.alloc(32);
  const n = readSync(fd, buf, 0, buf.length, 0);
  const text = buf.subarray(0, n).toString("latin1").trim();
  return /^\d{1,10}$/.test(text) ? Number(text) : undefined;
}
