// A seccomp filter as classic BPF, assembled here rather than by libseccomp (a C library the agent
// would need a native binding for): the program is small and its shape fixed, so a readable
// assembler of a few instructions is easier to review than a dependency. Pure: no I/O.
//
// Layout (each block only ever jumps a fixed, small distance, so the u8 jump offsets never
// overflow however long the list grows; the kernel caps a program at 4096 instructions):
//
//   ld  arch                 ; not x86_64 (an i386 `int 0x80` from a 64-bit process): kill
//   jeq AUDIT_ARCH, +1, +0
//   ret KILL_PROCESS
//   ld  nr
//   jeq -1, +0, +1           ; -1 is no system call (a tracer's "skip this one": strace's
//   ret ALLOW                ; fault injection); the kernel answers it ENOSYS, never kills
//   jge X32_BIT, +0, +1      ; the x32 ABI (nr | 0x40000000) reaches other entry points: kill
//   ret KILL_PROCESS
//   per rule:  jeq nr, +0, +1 ; ret ERRNO|e                       (any arguments)
//        or:   jeq nr, +0, +4 ; ld arg0 ; jeq v, +0, +1 ; ret ERRNO|e ; ld nr   (first argument == v)
//        or:   jeq nr, +0, +4 ; ld arg0 ; jset m, +0, +1 ; ret ERRNO|e ; ld nr  (any bit of m set in it)
//        or:   jeq nr, +0, +n+3 ; ld arg0 ; jeq v1, +n, +0 ; … ; jeq vn, +1, +0 ; ret ERRNO|e ; ld nr
//                                                          (first argument none of v1..vn, n ≤ 8)
//   ret ALLOW
//
// The argument rules read the low 32 bits of the first argument only (classic BPF loads 32-bit
// words): right for an `int` (socket's family) and for the flags the rules test (CLONE_NEWUSER is
// bit 28), as long as the kernel itself ignores or refuses the high half; seccomp.ts says why it
// does for each call it tests.
//
// A program that only looks at `arch` and `nr` (every rule but the argument ones) lets the kernel
// cache "allowed" per syscall number (5.11+, seccomp's action cache): allowed calls then skip the
// program entirely.

/** struct sock_filter: u16 code, u8 jt, u8 jf, u32 k. */
export interface Instruction {
  code: number;
  jt: number;
  jf: number;
  k: number;
}

/** A syscall the filter refuses: with `errno` (EPERM, or ENOSYS where software probes and falls
 * back), for any arguments, only when its first argument's low 32 bits equal `arg0`, or only when
 * they have any bit of `arg0Bits` set (flags: `unshare(CLONE_NEWUSER | …)`), or only when they are
 * none of `arg0NotIn` (a short list of allowed values: `personality`). At most one of the three. */
export interface DenyRule {
  nr: number;
  errno: number;
  arg0?: number;
  arg0Bits?: number;
  arg0NotIn?: readonly number[];
}

/** The longest `arg0NotIn` list: its block jumps n + 3 instructions at most. */
export const MAX_ALLOWED_VALUES = 8;

// linux/filter.h and linux/bpf_common.h
const BPF_LD_W_ABS = 0x00 | 0x00 | 0x20; // BPF_LD | BPF_W | BPF_ABS
const BPF_JEQ_K = 0x05 | 0x10 | 0x00; // BPF_JMP | BPF_JEQ | BPF_K
const BPF_JGE_K = 0x05 | 0x30 | 0x00; // BPF_JMP | BPF_JGE | BPF_K
const BPF_JSET_K = 0x05 | 0x40 | 0x00; // BPF_JMP | BPF_JSET | BPF_K: jump if (A & k) != 0
const BPF_RET_K = 0x06 | 0x00; // BPF_RET | BPF_K

// linux/seccomp.h
export const SECCOMP_RET_KILL_PROCESS = 0x80000000;
export const SECCOMP_RET_ERRNO = 0x00050000;
export const SECCOMP_RET_ALLOW = 0x7fff0000;
/** BPF_MAXINSNS: the kernel refuses a longer program. */
export const MAX_INSTRUCTIONS = 4096;

/** Offsets into struct seccomp_data { int nr; u32 arch; u64 ip; u64 args[6]; } (little-endian:
 * an argument's low 32 bits come first, which is all of an `int` argument). */
export const DATA_NR = 0;
export const DATA_ARCH = 4;
export const DATA_ARG0_LO = 16;

/** linux/audit.h: EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE. */
export const AUDIT_ARCH_X86_64 = 0xc000003e;
/** The number a tracer sets to skip a call (seccomp_data.nr as u32): not a system call. */
const NO_SYSCALL = 0xffffffff;
/** arch/x86/include/uapi/asm/unistd.h: __X32_SYSCALL_BIT. */
export const X32_SYSCALL_BIT = 0x40000000;

const ld = (offset: number): Instruction => ({ code: BPF_LD_W_ABS, jt: 0, jf: 0, k: offset });
const jeq = (k: number, jt: number, jf: number): Instruction => ({ code: BPF_JEQ_K, jt, jf, k });
const jge = (k: number, jt: number, jf: number): Instruction => ({ code: BPF_JGE_K, jt, jf, k });
const jset = (k: number, jt: number, jf: number): Instruction => ({ code: BPF_JSET_K, jt, jf, k });
const ret = (k: number): Instruction => ({ code: BPF_RET_K, jt: 0, jf: 0, k });

/** The filter for `arch`: anything else, or a syscall number at or past `rejectFrom` (x32 on
 * x86_64), kills the process; each rule's syscall gets its errno; the rest is allowed. */
export function assemble(arch: number, rules: readonly DenyRule[], rejectFrom: number = X32_SYSCALL_BIT): Instruction[] {
  const prog: Instruction[] = [ld(DATA_ARCH), jeq(arch, 1, 0), ret(SECCOMP_RET_KILL_PROCESS), ld(DATA_NR), jeq(NO_SYSCALL, 0, 1), ret(SECCOMP_RET_ALLOW), jge(rejectFrom, 0, 1), ret(SECCOMP_RET_KILL_PROCESS)];
  for (const r of rules) {
    if (!Number.isInteger(r.nr) || r.nr < 0 || r.nr >= rejectFrom) throw new Error(`seccomp: bad syscall number ${r.nr}`);
    if (!Number.isInteger(r.errno) || r.errno <= 0 || r.errno > 0xffff) throw new Error(`seccomp: bad errno ${r.errno}`);
    if ([r.arg0, r.arg0Bits, r.arg0NotIn].filter((a) => a !== undefined).length > 1) throw new Error(`seccomp: rule for ${r.nr} has more than one of arg0, arg0Bits, arg0NotIn`);
    if (r.arg0Bits !== undefined && (!Number.isInteger(r.arg0Bits) || r.arg0Bits <= 0 || r.arg0Bits > 0xffffffff)) throw new Error(`seccomp: bad arg0Bits ${r.arg0Bits}`);
    if (r.arg0NotIn !== undefined && (r.arg0NotIn.length < 1 || r.arg0NotIn.length > MAX_ALLOWED_VALUES || r.arg0NotIn.some((v) => !Number.isInteger(v) || v < 0 || v > 0xffffffff))) throw new Error(`seccomp: bad arg0NotIn for ${r.nr}: 1 to ${MAX_ALLOWED_VALUES} values of 32 bits`);
    const action = (SECCOMP_RET_ERRNO | r.errno) >>> 0;
    if (r.arg0NotIn) {
      // A listed value jumps over the rest of the list and the refusal, to `ld nr`.
      const n = r.arg0NotIn.length;
      prog.push(jeq(r.nr, 0, n + 3), ld(DATA_ARG0_LO), ...r.arg0NotIn.map((v, i) => jeq(v >>> 0, n - i, 0)), ret(action), ld(DATA_NR));
      continue;
    }
    const test = r.arg0Bits !== undefined ? jset(r.arg0Bits >>> 0, 0, 1) : r.arg0 !== undefined ? jeq(r.arg0 >>> 0, 0, 1) : undefined;
    if (!test) prog.push(jeq(r.nr, 0, 1), ret(action));
    else prog.push(jeq(r.nr, 0, 4), ld(DATA_ARG0_LO), test, ret(action), ld(DATA_NR));
  }
  prog.push(ret(SECCOMP_RET_ALLOW));
  if (prog.length > MAX_INSTRUCTIONS) throw new Error(`seccomp: ${prog.length} instructions, the kernel takes at most ${MAX_INSTRUCTIONS}`);
  return prog;
}

/** The program as the kernel (and bwrap's `--seccomp`) reads it: 8 bytes per instruction, in
 * the host's byte order (little-endian on every architecture the driver supports). */
export function encode(prog: readonly Instruction[]): Buffer {
  const out = Buffer.alloc(prog.length * 8);
  prog.forEach((ins, i) => {
    out.writeUInt16LE(ins.code, i * 8);
    out.writeUInt8(ins.jt, i * 8 + 2);
    out.writeUInt8(ins.jf, i * 8 + 3);
    out.writeUInt32LE(ins.k >>> 0, i * 8 + 4);
  });
  return out;
}
