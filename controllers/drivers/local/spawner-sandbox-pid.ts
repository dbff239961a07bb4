// The pid a command has inside its sandbox, for the runtime to report instead of the host pid.
//
// Commands start through enter.pl, which stays on the host side as the process the spawner
// started and forks once into the sandbox's pid namespace (see enter.pl). Clients must see the
// pid the sandbox sees (`$$`, `kill <pid>`, `/proc/<pid>`), as with envd inside a VM: that is
// the last NSpid field of enter.pl's only child. The child exists a few ms after the spawn
// (perl's start, cgroup join, setns), so it is looked up until it appears, and the start waits
// that long (median ~2–3 ms in the agent on the 2-core machine, more under load). Nothing inside the sandbox can forge it: it comes from the host's /proc.
import { existsSync, readFileSync } from "node:fs";

/** How often to look while enter.pl starts (it forks ~3–6 ms after the spawn). */
const POLL_MS = 1;
/** A wrapper that has not forked by then is stuck (a frozen cgroup it joined); report the host
 * pid rather than hold the start back. */
const GIVE_UP_MS = 2_000;

/** Without CONFIG_PROC_CHILDREN a kernel has no children file: report host pids rather than
 * hold every start back until the give-up. */
const CAN_LOOK = existsSync(`/proc/self/task/${process.pid}/children`);

function read(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
}

/** The pid `pid` has in the innermost pid namespace it belongs to. */
function innermostPid(pid: number): number | undefined {
  const ns = read(`/proc/${pid}/status`)?.match(/^NSpid:\s*(.*)$/m)?.[1]?.trim().split(/\s+/).at(-1);
  return ns ? Number(ns) : undefined;
}

/** The sandbox pid of the command `hostPid` (enter.pl) forks, once that child has exec'd the
 * command; undefined when it ended (or gave up) before it forked: a command gone within
 * milliseconds has no pid anyone could use.
 *
 * The child is enter.pl itself (perl, still root in the sandbox) until it has switched user and
 * exec'd, some milliseconds after the fork: a start reported before that named a process that was
 * not yet the command (CI: `ps` on the host right after a background start found no `sleep` of
 * the user's uid). As with envd's start (Go's exec returns once the new image runs), the pid is
 * reported once the child's command line is no longer enter.pl's, or once it is gone. */
export async function sandboxPidOf(hostPid: number, ended: () => boolean): Promise<number | undefined> {
  if (!CAN_LOOK) return undefined;
  const deadline = Date.now() + GIVE_UP_MS;
  const own = read(`/proc/${hostPid}/cmdline`);
  let found: number | undefined;
  for (;;) {
    const child = read(`/proc/${hostPid}/task/${hostPid}/children`)?.trim().split(" ")[0];
    const pid = child ? innermostPid(Number(child)) : undefined;
    if (pid !== undefined) {
      found = pid;
      // Exec'd: another command line (or none left to read: it ended, or exec'd and ended).
      const line = read(`/proc/${child}/cmdline`);
      if (own === undefined || line === undefined || line !== own) return pid;
    }
    if (ended() || Date.now() > deadline) return found;
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}
