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

/** PF_EXITING in the flags (field 9): set once the process has begun to exit. */
export const PF_EXITING = 0x4;

/** The fields of a `/proc/<pid>/stat` line after the command name (field 3, the state, first:
 * index 0; the start time, field 22, is index 19), or undefined for text that is no such line.
 * The one parse of it (holder.ts reads it by pid and through descriptors, handleIs through a
 * handle). The name (field 2) is the process's own choice (a task's comm: 15 bytes; a kernel
 * thread's may be longer) and may hold ")", spaces and newlines: only numbers follow it, so the
 * fields start after the last `)`. */
export function statFieldsIn(stat: string): string[] | undefined {
  const paren = stat.lastIndexOf(")");
  if (paren < 0) return undefined;
  const fields = stat.slice(paren + 2).trimEnd().split(" ");
  return fields.length > 19 ? fields : undefined;
}

/** Whether a process whose stat fields these are has ended: a zombie (Z) or dead (X), or exiting
 * (PF_EXITING: it runs nothing more, though a pid 1 waiting in its namespace's teardown still
 * shows state S). The one definition (alive, exiting, handleIs; StatHandle's byte parse
 * tests the same). */
export function fieldsEnded(f: string[]): boolean {
  return f[0] === "Z" || f[0] === "X" || (Number(f[6]) & PF_EXITING) !== 0;
}

/** Whether the handle `fd` (an open /proc/<pid>) is still the live process `ref` recorded: its
 * start time, read through the handle (a gone process answers nothing), and not ended (a zombie's
 * root and namespaces no longer answer; an exiting one's are going), as `alive` says. */
export function handleIs(fd: number, ref: ProcRef): boolean {
  try {
    const f = statFieldsIn(readFileSync(`/proc/self/fd/${fd}/stat`, "latin1"));
    return f !== undefined && f[19] === ref.start && !fieldsEnded(f);
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
