// What the local driver's host-side perl helpers (enter.pl, port-relay.pl) are started with.
// They run as root in the host's namespaces until they have entered a sandbox, so:
// - their environment is fixed here and never carries a byte a tenant sent (perl, the dynamic
//   loader and any shell read code to run from PERL5OPT, PERL5LIB, LD_PRELOAD, BASH_ENV and kin);
//   a sandboxed command's own environment travels separately (HostCommand.sandboxEnv);
// - every syscall number they need comes from one table per architecture, and any other
//   architecture is refused with a clear error rather than a wrong syscall.
// Why perl at all, and the alternatives: README.md in this folder ("Host helpers").
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { arch } from "node:os";

export const PERL = "/usr/bin/perl";

/** PATH of every host helper: system directories only. */
export const HELPER_PATH = "/usr/sbin:/usr/bin:/sbin:/bin";

/** The whole environment of a host helper: PATH plus the driver's own fixed variables. */
export function helperEnv(own: Record<string, string> = {}): Record<string, string> {
  return { PATH: HELPER_PATH, ...own };
}

/** Syscalls perl has no wrapper for. */
export interface SyscallNumbers {
  setns: number;
  prctl: number;
  unshare: number;
  mount: number;
  /** The mount API (5.2+); numbered alike on every architecture since 5.1's unified table. */
  openTree: number;
  mountSetattr: number;
  moveMount: number;
  /** The port relay's zero-copy relay of a handed-off connection (port-relay.pl `splice_pump`). */
  splice: number;
  /** clone3 (5.3+, the unified table: the same number everywhere); the tests' pid squatter. */
  clone3: number;
  /** A sandbox's unmount before its directory's deletion, in the helper that then becomes `rm`
   * (remove-tree.ts `unmountThenRemove`): no `umount` process of its own. */
  umount2: number;
}

/** From the kernel's syscall tables: arch/x86/entry/syscalls/syscall_64.tbl and
 * include/uapi/asm-generic/unistd.h (arm64). */
const SYSCALLS: Record<string, SyscallNumbers> = {
  x64: { setns: 308, prctl: 157, unshare: 272, mount: 165, openTree: 428, mountSetattr: 442, moveMount: 429, splice: 275, clone3: 435, umount2: 166 },
  arm64: { setns: 268, prctl: 167, unshare: 97, mount: 40, openTree: 428, mountSetattr: 442, moveMount: 429, splice: 76, clone3: 435, umount2: 39 },
};

export function syscallNumbers(cpu: string = arch()): SyscallNumbers {
  const nrs = knownSyscallNumbers(cpu);
  if (!nrs) throw new Error(`local driver: no syscall numbers for ${cpu} (supported: ${Object.keys(SYSCALLS).join(", ")})`);
  return nrs;
}

/** The table's numbers for `cpu`, or none: for a caller with a way that needs no helper syscall. */
export function knownSyscallNumbers(cpu: string = arch()): SyscallNumbers | undefined {
  return SYSCALLS[cpu];
}

/** The log's last line (from its last 4 KiB: a helper's log may hold whatever a sandbox made it write). */
export function lastLine(file: string): string {
  let fd: number | undefined;
  try {
    fd = openSync(file, "r");
    const size = fstatSync(fd).size;
    const buf = Buffer.alloc(Math.min(size, 4096));
    readSync(fd, buf, 0, buf.length, size - buf.length);
    return buf.toString("utf8").trimEnd().split("\n").at(-1)!.slice(-300);
  } catch {
    return "no log";
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}
