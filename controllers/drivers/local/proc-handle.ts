// One process's /proc directory, held open: what a host helper of the driver reaches a sandbox's
// pid 1 through (its root, its namespaces), never the pid again. The path `/proc/<pid>` names
// whichever process has the pid now: root inside a sandbox can end its own pid 1 (ptrace, then
// SIGKILL), and a host process may then take that pid, whose `/proc/<pid>/root` is the host's `/`.
// An open `/proc/<pid>` stays bound to the process it was opened for: once that process is gone,
// every lookup under it fails, whoever has the pid by then. So a handle is opened, checked through
// itself for the recorded start time (field 22 of its stat), and everything else is opened under
// it as `/proc/self/fd/<fd>/...` (enter.pl and allow-setuid.pl do the same in perl).
import { closeSync, constants, openSync, readFileSync } from "node:fs";
import type { ProcRef } from "./records.ts";

/** Whether the handle `fd` (an open /proc/<pid>) is still the live process `ref` recorded: its
 * start time, read through the handle (a gone process answers nothing), and not a zombie (whose
 * root and namespaces no longer answer). The name (field 2) is the process's own choice and may
 * hold ") " and newlines: the fields start after the last `)` of the whole file. */
export function handleIs(fd: number, ref: ProcRef): boolean {
  try {
    const stat = readFileSync(`/proc/self/fd/${fd}/stat`, "latin1");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return f[19] === ref.start && f[0] !== "Z";
  } catch {
    return false;
  }
}

/** An open `/proc/<pid>` of the process `ref` names, or undefined when that process is gone (its
 * pid free, or another process's now). The caller closes it. */
export function openProc(ref: ProcRef): number | undefined {
  let fd: number;
  try {
    fd = openSync(`/proc/${ref.pid}`, constants.O_RDONLY | constants.O_DIRECTORY);
  } catch {
    return undefined;
  }
  if (handleIs(fd, ref)) return fd;
  closeSync(fd);
  return undefined;
}
