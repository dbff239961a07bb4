// The pid a command has inside its sandbox, for the runtime to report instead of the host pid.
//
// Commands start through enter.pl, which stays on the host side as the process the spawner
// started and forks once into the sandbox's pid namespace (see enter.pl). Clients must see the
// pid the sandbox sees (`$$`, `kill <pid>`, `/proc/<pid>`), as with envd inside a VM: the pid of
// enter.pl's only child in its own namespace. enter.pl reports it itself, in a file the agent
// names (KRUISE_PID_FILE, in the spawner's private directory), once the child has exec'd the
// command and before it reaps the child: a start is reported once the command runs (as Go's exec
// returns once the new image does), and a command that is done at once still has its pid. The
// child's own pid comes from the child, before its exec, so nothing the command runs can forge it.
//
// Looking for the child in /proc instead (main before session 14) missed commands that were
// reaped before the first look (6–8 % of `echo` one at a time, 13–26 % four at a time), and the
// runtime then reported the host's pid to the tenant.
import { readFileSync, watch, type FSWatcher } from "node:fs";

/** The wrapper's environment variable that names the report file, and the value a view puts
 * there for its launcher (spawner.ts) to replace with a file: as it is, enter.pl reports nothing
 * (a direct spawn in a test or bench, the driver's own `exec`, which report no pid). */
export const PID_FILE_ENV = "KRUISE_PID_FILE";
export const PID_FILE_WANTED = "-";

/** How often to look where no inotify watch can be had. */
const POLL_MS = 1;
/** A wrapper that has not reported by then is stuck (a frozen cgroup it joined): the start fails
 * rather than hold the request back. */
export const GIVE_UP_MS = 2_000;
/** The kernel's largest pid (PID_MAX_LIMIT on 64-bit). */
const PID_MAX_LIMIT = 4_194_304;

/** The pid in a report: decimal digits and a newline, nothing else (enter.pl writes it whole, in
 * one write, before it exits). */
export function parseReport(text: string | undefined): number | undefined {
  const m = text === undefined ? null : /^([1-9]\d{0,6})\n$/.exec(text);
  const pid = m ? Number(m[1]) : undefined;
  return pid !== undefined && pid <= PID_MAX_LIMIT ? pid : undefined;
}

function read(path: string): string | undefined {
  try {
    return readFileSync(path, "latin1");
  } catch {
    return undefined;
  }
}

/** The sandbox pid enter.pl reports in `file`, which must exist before the wrapper starts;
 * undefined when the wrapper ended (`ended` settled), or gave up, without one, which means it
 * never forked: the command never ran in the sandbox. Woken by the write itself (inotify), not
 * by a poll: one look per millisecond of a start (p50 13–16 ms at load 5 on the 2-core machine)
 * cost the agent as much as the report saved. Looked at once more at the end, since enter.pl
 * writes the report before it exits. */
export function sandboxPidOf(file: string, ended: Promise<unknown>): Promise<number | undefined> {
  return new Promise((resolve) => {
    let done = false;
    let watcher: FSWatcher | undefined;
    let poll: NodeJS.Timeout | undefined;
    const finish = (pid: number | undefined) => {
      if (done) return;
      done = true;
      watcher?.close();
      clearInterval(poll);
      clearTimeout(giveUp);
      resolve(pid);
    };
    const look = () => {
      const pid = parseReport(read(file));
      if (pid !== undefined) finish(pid);
    };
    const last = () => finish(parseReport(read(file)));
    const giveUp = setTimeout(last, GIVE_UP_MS);
    try {
      watcher = watch(file, { persistent: false }, look);
      watcher.on("error", () => (poll ??= setInterval(look, POLL_MS)));
    } catch {
      // No inotify watch left (fs.inotify.max_user_watches): look every millisecond instead.
      poll = setInterval(look, POLL_MS);
    }
    // A report written before the watch began.
    look();
    void ended.then(last, last);
  });
}
