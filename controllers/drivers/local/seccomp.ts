// The seccomp filter of every local sandbox: its holder (bwrap's `--seccomp`), every command that
// enters it (enter.pl loads the same program before exec) and template build steps. README.md in
// this folder ("Seccomp") says what is refused and why; the assembler is seccomp-bpf.ts.
//
// Intent from Docker's default profile (moby profiles/seccomp/default.json) for a container whose
// root holds CAP_SYS_ADMIN, but only in a user namespace of its own: what that capability opens
// there stays open (mount, umount2, pivot_root, unshare and clone of the other namespaces: `mount
// -t tmpfs`, `unshare --mount`), and what reaches kernel state no namespace confines, or a
// known-fragile subsystem, is refused. A new user namespace is refused too, as Docker refuses it:
// inside one any user gets every capability back over what it then makes (nf_tables, tc,
// overlayfs), the kernel surface most container escapes went through. A template the operator
// marks `nestedUserNamespaces` gets the filter without those three rules (Chromium's sandbox,
// rootless podman, bwrap inside). A denylist, not Docker's allowlist: a new syscall is allowed
// until we decide, as on a VM.
import { arch } from "node:os";
import { assemble, AUDIT_ARCH_X86_64, encode, type DenyRule } from "./seccomp-bpf.ts";

const EPERM = 1;
const ENOSYS = 38;
/** socket(2)'s address family of host-VM sockets (linux/socket.h). */
const AF_VSOCK = 40;
/** personality(2) values Docker's default profile allows (linux/personality.h): PER_LINUX,
 * PER_LINUX32, UNAME26, PER_LINUX32 | UNAME26, and 0xffffffff (the query: changes nothing). */
export const PERSONALITIES = [0x0, 0x8, 0x20000, 0x20008, 0xffffffff] as const;
/** linux/sched.h: bit 28, in the low half of clone's and unshare's 64-bit flags. */
export const CLONE_NEWUSER = 0x10000000;

/** The syscalls named below, x86_64 numbers from the kernel's
 * arch/x86/entry/syscalls/syscall_64.tbl (checked against asm/unistd_64.h of the build host). */
export const X86_64: Record<string, number> = {
  socket: 41, clone: 56, syslog: 103, uselib: 134, personality: 135, _sysctl: 156, acct: 163, settimeofday: 164, swapon: 167, swapoff: 168, reboot: 169,
  iopl: 172, ioperm: 173, init_module: 175, delete_module: 176, quotactl: 179, nfsservctl: 180, lookup_dcookie: 212,
  clock_settime: 227, kexec_load: 246, unshare: 272, add_key: 248, request_key: 249, keyctl: 250, perf_event_open: 298,
  open_by_handle_at: 304, finit_module: 313, kexec_file_load: 320, bpf: 321, userfaultfd: 323, io_uring_setup: 425,
  io_uring_enter: 426, io_uring_register: 427, open_tree: 428, move_mount: 429, fsopen: 430, fsconfig: 431, fsmount: 432,
  fspick: 433, clone3: 435, mount_setattr: 442, quotactl_fd: 443, open_tree_attr: 467,
};

export interface Denied {
  name: string;
  errno: typeof EPERM | typeof ENOSYS;
  /** Only when the first argument is this (socket's family). */
  arg0?: number;
  /** Only when the first argument has any of these bits (clone's and unshare's flags). */
  arg0Bits?: number;
  /** Only when the first argument is none of these (personality's allowed values). */
  arg0NotIn?: readonly number[];
}

const perm = (...names: string[]): Denied[] => names.map((name) => ({ name, errno: EPERM }));
const nosys = (...names: string[]): Denied[] => names.map((name) => ({ name, errno: ENOSYS }));

/** What the filter refuses (README.md "Seccomp" has each group's reason and what it breaks). */
export const DENIED: readonly Denied[] = [
  // The host's kernel itself: modules, kexec, reboot, swap, accounting, raw I/O ports.
  ...perm("init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "iopl", "ioperm"),
  // Host-wide state no namespace confines: the clock, the kernel log, quotas, the keyrings.
  ...perm("settimeofday", "clock_settime", "syslog", "quotactl", "quotactl_fd", "add_key", "request_key", "keyctl"),
  // The file-handle escape (reads any inode of a mounted file system by handle).
  ...perm("open_by_handle_at"),
  // Kernel attack surface reachable without host privileges: eBPF, perf, userfaultfd (widens races).
  ...perm("bpf", "perf_event_open", "userfaultfd"),
  // Obsolete (removed or unused for years): nothing should call them.
  ...perm("uselib", "_sysctl", "nfsservctl", "lookup_dcookie"),
  // Sockets to the hypervisor: vsock is not per network namespace.
  { name: "socket", errno: EPERM, arg0: AF_VSOCK },
  // Execution domains: only Docker's values (PER_LINUX, PER_LINUX32, UNAME26, both, and the
  // query 0xffffffff). The other flags change how the kernel maps memory for what the process
  // execs: ADDR_NO_RANDOMIZE turns ASLR off (for a setuid program like sudo too),
  // READ_IMPLIES_EXEC makes readable memory executable, MMAP_PAGE_ZERO maps page 0. `personality`
  // takes an unsigned int: the high half of the register is not read by the kernel either.
  { name: "personality", errno: EPERM, arg0NotIn: PERSONALITIES },
  // Probed and fallen back from on ENOSYS ("this kernel has none"): io_uring (libuv, liburing
  // users) and the new mount API (util-linux's libmount falls back to mount(2)), whose parameter
  // parsing gave the user-namespace root a heap overflow before (CVE-2022-0185).
  ...nosys("io_uring_setup", "io_uring_enter", "io_uring_register"),
  ...nosys("fsopen", "fsconfig", "fsmount", "fspick", "open_tree", "open_tree_attr", "move_mount", "mount_setattr"),
];

/**
 * A new user namespace, refused unless the template has `nestedUserNamespaces`. The filter reads
 * the low 32 bits of the flags (seccomp-bpf.ts); the high half cannot carry CLONE_NEWUSER past
 * it: clone(2) keeps only the low half (`lower_32_bits(clone_flags)`), unshare(2) answers EINVAL
 * to any bit it does not know. clone3 takes its flags in memory the filter cannot read, so it is
 * ENOSYS as in Docker's profile: glibc (fork, posix_spawn, pthread_create) and Go fall back to
 * clone, which the filter reads. setns stays open: joining a user namespace needs CAP_SYS_ADMIN
 * in it, which a sandbox's process holds only in the namespaces it made (none, refused here) and
 * never in an ancestor, the only other ones it can name.
 */
export const NEW_USER_NAMESPACE: readonly Denied[] = [
  { name: "unshare", errno: EPERM, arg0Bits: CLONE_NEWUSER },
  { name: "clone", errno: EPERM, arg0Bits: CLONE_NEWUSER },
  ...nosys("clone3"),
];

/** What a filter lets a sandbox do beyond the default: the template's operator-set opt-in. */
export interface FilterOptions {
  nestedUserNamespaces?: boolean;
}

/** The sandbox filter's program for a CPU (Node's `os.arch()` name); throws on one it has no
 * syscall table for: a sandbox never runs unfiltered without being asked to. */
export function sandboxFilter(cpu: string = arch(), opts: FilterOptions = {}): Buffer {
  if (cpu !== "x64") throw new Error(`local driver: no seccomp filter for ${cpu} (only x64 has a syscall table); set KRUISE_LOCAL_SECCOMP=off to run sandboxes without one`);
  const denied = opts.nestedUserNamespaces ? DENIED : [...DENIED, ...NEW_USER_NAMESPACE];
  const rules: DenyRule[] = denied.map((d) => {
    const nr = X86_64[d.name];
    if (nr === undefined) throw new Error(`seccomp: no x86_64 number for ${d.name}`);
    return { nr, errno: d.errno, arg0: d.arg0, arg0Bits: d.arg0Bits, arg0NotIn: d.arg0NotIn };
  });
  return encode(assemble(AUDIT_ARCH_X86_64, rules));
}

/** The filter a sandbox gets, or undefined where the operator turned it off
 * (`KRUISE_LOCAL_SECCOMP=off`: for comparison, or a CPU without a table). */
export function seccompProgram(env: NodeJS.ProcessEnv = process.env, opts: FilterOptions = {}): Buffer | undefined {
  return env.KRUISE_LOCAL_SECCOMP === "off" ? undefined : sandboxFilter(arch(), opts);
}
