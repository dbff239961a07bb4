// Descriptors a process inherited without close-on-exec (a supervisor's pipe, a shell's `3>file`,
// a CI runner's log) pass on to every process it starts: from the agent through the spawner and
// enter.pl into every sandbox, where a tenant could read or write a host file, pipe or socket it
// was never given (seen: a harness's pipe at fd 251 in a tenant's command and in the sandbox's
// pid 2). Node opens its own descriptors close-on-exec, so at start-up any descriptor above
// stderr without the flag is one the process inherited, and nothing of ours uses it: closed.
// Node has no fcntl, so the flag is read from /proc/self/fdinfo (`flags:` is octal).
import { closeSync, readdirSync, readFileSync } from "node:fs";

const O_CLOEXEC = 0o2000000;

/** Closes every descriptor above stderr that lacks close-on-exec, but `keep`. Returns the
 * descriptors it closed. (Node's IPC channel, in a forked process, is close-on-exec already.) */
export function closeInheritedFds(keep: readonly number[] = []): number[] {
  const closed: number[] = [];
  for (const name of readdirSync("/proc/self/fd")) {
    const fd = Number(name);
    if (fd <= 2 || keep.includes(fd)) continue;
    let flags: number;
    try {
      // The directory's own descriptor is gone by now: its fdinfo no longer exists.
      const m = /^flags:\s*([0-7]+)$/m.exec(readFileSync(`/proc/self/fdinfo/${fd}`, "latin1"));
      if (!m) continue;
      flags = parseInt(m[1]!, 8);
    } catch {
      continue;
    }
    if (flags & O_CLOEXEC) continue;
    try {
      closeSync(fd);
      closed.push(fd);
    } catch {
      // Closed meanwhile: nothing to leak.
    }
  }
  return closed;
}
