// The pid a command has inside its sandbox, for the runtime to report instead of the host pid.
//
// Commands start through enter.pl, which stays on the host side as the process the spawner
// started and forks once into the sandbox's pid namespace (see enter.pl). Clients must see the
// pid the sandbox sees (`$$`, `kill <pid>`, `/proc/<pid>`), as with envd inside a VM: that is
// the last NSpid field of enter.pl's only child. Nothing inside the sandbox can forge it: it
// comes from the host's /proc.
//
// Through the spawner, enter.pl reports it itself once its child has exec'd, read from the host's
// /proc before it reaps the child (a descriptor the spawner hands it, see enter.pl; `ExecReport`
// takes that report). Terminals (node-pty passes no extra descriptor) and the in-process launcher
// look it up here until it appears instead (`sandboxPidOf`, ~2–3 ms of 1 ms polls on the 2-core
// machine, more under load).
import { existsSync, readFileSync } from "node:fs";

/** How often to look while enter.pl starts (it forks ~3–6 ms after the spawn). */
const POLL_MS = 1;
/** A wrapper that has not forked by then is stuck (a frozen cgroup it joined); report the host
 * pid rather than hold the start back. */
export const GIVE_UP_MS = 2_000;

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

/** What enter.pl writes on its exec descriptor: the pid in decimal and a newline, then its end
 * of file. Anything else (more bytes, another shape, a pid no kernel gives) counts as no report;
 * at most a line's worth is kept. */
export class ExecReport {
  #text = "";
  #over = false;

  add(chunk: Buffer): void {
    if (this.#over || this.#text.length + chunk.length > MAX_REPORT) this.#over = true;
    else this.#text += chunk.toString("latin1");
  }

  pid(): number | undefined {
    const m = this.#over ? null : /^([1-9]\d{0,6})\n$/.exec(this.#text);
    const pid = m ? Number(m[1]) : undefined;
    return pid !== undefined && pid <= PID_MAX_LIMIT ? pid : undefined;
  }
}
/** The longest report: 7 digits and a newline. */
const MAX_REPORT = 8;
/** The kernel's largest pid (PID_MAX_LIMIT on 64-bit). */
const PID_MAX_LIMIT = 4_194_304;

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
