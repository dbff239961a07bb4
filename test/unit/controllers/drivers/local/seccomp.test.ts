// The seccomp assembler (seccomp-bpf.ts) and the sandbox filter (seccomp.ts): exact bytes for a
// small list, and the programs run through a classic-BPF interpreter of the instructions they use,
// as the kernel would run them on a syscall's seccomp_data.
import { describe, expect, it } from "vitest";
import { assemble, AUDIT_ARCH_X86_64, encode, MAX_INSTRUCTIONS, SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO, SECCOMP_RET_KILL_PROCESS, X32_SYSCALL_BIT, type Instruction } from "../../../../../controllers/drivers/local/seccomp-bpf.ts";
import { CLONE_NEWUSER, DENIED, NEW_USER_NAMESPACE, PERSONALITIES, sandboxFilter, seccompProgram, X86_64, type Denied } from "../../../../../controllers/drivers/local/seccomp.ts";

const AUDIT_ARCH_I386 = 0x40000003;
/** personality(2)'s ADDR_NO_RANDOMIZE: not one of Docker's values. */
const ADDR_NO_RANDOMIZE = 0x0040000;
/** A first argument the rule refuses. */
const refusedArg = (d: Denied) => d.arg0 ?? d.arg0Bits ?? (d.arg0NotIn ? ADDR_NO_RANDOMIZE : undefined);

/** Decodes the kernel's byte layout back into instructions. */
function decode(bytes: Buffer): Instruction[] {
  expect(bytes.length % 8).toBe(0);
  return Array.from({ length: bytes.length / 8 }, (_, i) => ({ code: bytes.readUInt16LE(i * 8), jt: bytes[i * 8 + 2]!, jf: bytes[i * 8 + 3]!, k: bytes.readUInt32LE(i * 8 + 4) }));
}

/** Runs a program on one syscall, as the kernel's classic-BPF interpreter does for the
 * instructions the assembler emits; anything else fails the test. */
function run(prog: Instruction[], call: { nr: number; arch?: number; arg0?: number; arg0High?: number }): number {
  const data = Buffer.alloc(64);
  data.writeInt32LE(call.nr | 0, 0);
  data.writeUInt32LE(call.arch ?? AUDIT_ARCH_X86_64, 4);
  data.writeUInt32LE((call.arg0 ?? 0) >>> 0, 16);
  data.writeUInt32LE((call.arg0High ?? 0) >>> 0, 20);
  let a = 0;
  for (let pc = 0; pc < prog.length; pc++) {
    const { code, jt, jf, k } = prog[pc]!;
    if (code === 0x20) a = data.readUInt32LE(k);
    else if (code === 0x15) pc += a === k ? jt : jf;
    else if (code === 0x35) pc += a >= k ? jt : jf;
    else if (code === 0x45) pc += (a & k) !== 0 ? jt : jf;
    else if (code === 0x06) return k;
    else throw new Error(`unexpected opcode ${code}`);
  }
  throw new Error("ran off the end of the program");
}

describe("seccomp assembler", () => {
  it("encodes a small list as the kernel reads it: arch check first, then x32, rules, allow", () => {
    const bytes = encode(assemble(AUDIT_ARCH_X86_64, [{ nr: 250, errno: 1 }, { nr: 41, errno: 1, arg0: 40 }]));
    expect(bytes.toString("hex")).toBe(
      [
        "2000000004000000", // ld [4]            arch
        "150001003e0000c0", // jeq #0xc000003e, +1, +0
        "0600000000000080", // ret KILL_PROCESS
        "2000000000000000", // ld [0]            nr
        "15000001ffffffff", // jeq #-1, +0, +1   no system call (a tracer's skip)
        "060000000000ff7f", // ret ALLOW
        "3500000100000040", // jge #0x40000000, +0, +1
        "0600000000000080", // ret KILL_PROCESS
        "15000001fa000000", // jeq #250, +0, +1
        "0600000001000500", // ret ERRNO|EPERM
        "1500000429000000", // jeq #41, +0, +4
        "2000000010000000", // ld [16]           args[0], low half
        "1500000128000000", // jeq #40, +0, +1
        "0600000001000500", // ret ERRNO|EPERM
        "2000000000000000", // ld [0]            nr again
        "060000000000ff7f", // ret ALLOW
      ].join(""),
    );
  });

  it("encodes a flag rule as jset on the first argument's low half", () => {
    const bytes = encode(assemble(AUDIT_ARCH_X86_64, [{ nr: 272, errno: 1, arg0Bits: 0x10000000 }]));
    expect(bytes.subarray(8 * 8).toString("hex")).toBe(
      [
        "1500000410010000", // jeq #272, +0, +4
        "2000000010000000", // ld [16]           args[0], low half
        "4500000100000010", // jset #0x10000000, +0, +1
        "0600000001000500", // ret ERRNO|EPERM
        "2000000000000000", // ld [0]            nr again
        "060000000000ff7f", // ret ALLOW
      ].join(""),
    );
    const prog = decode(bytes);
    expect(run(prog, { nr: 272, arg0: 0x10000000 | 0x40000000 })).toBe(SECCOMP_RET_ERRNO | 1);
    expect(run(prog, { nr: 272, arg0: 0x40000000 })).toBe(SECCOMP_RET_ALLOW);
    expect(() => assemble(AUDIT_ARCH_X86_64, [{ nr: 1, errno: 1, arg0Bits: 0 }])).toThrow(/bad arg0Bits/);
    expect(() => assemble(AUDIT_ARCH_X86_64, [{ nr: 1, errno: 1, arg0: 1, arg0Bits: 1 }])).toThrow(/more than one/);
  });

  it("keeps every jump short past 255 instructions, and the last rule still matches", () => {
    const rules = Array.from({ length: 300 }, (_, i) => ({ nr: 1000 + i, errno: 1 + (i % 100), arg0: i % 3 === 0 ? i : undefined, arg0Bits: i % 3 === 1 ? 2 ** (i % 32) : undefined }));
    const prog = decode(encode(assemble(AUDIT_ARCH_X86_64, rules)));
    expect(prog.length).toBeGreaterThan(1000);
    for (const ins of prog) expect(Math.max(ins.jt, ins.jf)).toBeLessThanOrEqual(4);
    expect(run(prog, { nr: 1299 })).toBe(SECCOMP_RET_ERRNO | 100);
    expect(run(prog, { nr: 1297, arg0: 297 })).toBe(SECCOMP_RET_ERRNO | 98);
    expect(run(prog, { nr: 1297, arg0: 1 })).toBe(SECCOMP_RET_ALLOW);
    // Rule 298 refuses bit 298 % 32 = 10 among others; without it, allowed.
    expect(run(prog, { nr: 1298, arg0: (1 << 10) | 3 })).toBe(SECCOMP_RET_ERRNO | 99);
    expect(run(prog, { nr: 1298, arg0: 3 })).toBe(SECCOMP_RET_ALLOW);
    expect(run(prog, { nr: 999 })).toBe(SECCOMP_RET_ALLOW);
  });

  it("encodes an allowed-values rule: a listed value jumps past the refusal, any other is refused", () => {
    const bytes = encode(assemble(AUDIT_ARCH_X86_64, [{ nr: 135, errno: 1, arg0NotIn: [0, 8] }, { nr: 250, errno: 1 }]));
    expect(bytes.subarray(8 * 8).toString("hex")).toBe(
      [
        "1500000587000000", // jeq #135, +0, +5
        "2000000010000000", // ld [16]           args[0], low half
        "1500020000000000", // jeq #0, +2, +0    allowed: to ld nr
        "1500010008000000", // jeq #8, +1, +0
        "0600000001000500", // ret ERRNO|EPERM
        "2000000000000000", // ld [0]            nr again
        "15000001fa000000", // jeq #250, +0, +1  the next rule
        "0600000001000500", // ret ERRNO|EPERM
        "060000000000ff7f", // ret ALLOW
      ].join(""),
    );
    const prog = decode(bytes);
    expect(run(prog, { nr: 135, arg0: 0 })).toBe(SECCOMP_RET_ALLOW);
    expect(run(prog, { nr: 135, arg0: 8 })).toBe(SECCOMP_RET_ALLOW);
    expect(run(prog, { nr: 135, arg0: 9 })).toBe(SECCOMP_RET_ERRNO | 1);
    expect(run(prog, { nr: 250, arg0: 0 })).toBe(SECCOMP_RET_ERRNO | 1);
    expect(() => assemble(AUDIT_ARCH_X86_64, [{ nr: 1, errno: 1, arg0NotIn: [] }])).toThrow(/bad arg0NotIn/);
    expect(() => assemble(AUDIT_ARCH_X86_64, [{ nr: 1, errno: 1, arg0NotIn: Array.from({ length: 9 }, (_, i) => i) }])).toThrow(/bad arg0NotIn/);
    expect(() => assemble(AUDIT_ARCH_X86_64, [{ nr: 1, errno: 1, arg0: 1, arg0NotIn: [1] }])).toThrow(/more than one/);
  });

  it("refuses a program the kernel would not load, and numbers or errnos out of range", () => {
    expect(() => assemble(AUDIT_ARCH_X86_64, Array.from({ length: 2100 }, (_, i) => ({ nr: i, errno: 1 })))).toThrow(/at most 4096/);
    expect(MAX_INSTRUCTIONS).toBe(4096);
    expect(() => assemble(AUDIT_ARCH_X86_64, [{ nr: X32_SYSCALL_BIT + 1, errno: 1 }])).toThrow(/bad syscall number/);
    expect(() => assemble(AUDIT_ARCH_X86_64, [{ nr: 1, errno: 0 }])).toThrow(/bad errno/);
  });
});

describe("the sandbox filter", () => {
  const prog = decode(sandboxFilter("x64"));

  it("kills another ABI: i386 from a 64-bit process, and x32 numbers", () => {
    expect(run(prog, { nr: 39, arch: AUDIT_ARCH_I386 })).toBe(SECCOMP_RET_KILL_PROCESS);
    expect(run(prog, { nr: X32_SYSCALL_BIT | 39 })).toBe(SECCOMP_RET_KILL_PROCESS);
    // -1 is no system call (strace's fault injection skips a call so): the kernel answers ENOSYS.
    expect(run(prog, { nr: -1 })).toBe(SECCOMP_RET_ALLOW);
    // x32's own numbers of keyctl and io_uring_setup are refused the same way, not allowed.
    expect(run(prog, { nr: X32_SYSCALL_BIT | X86_64.keyctl! })).toBe(SECCOMP_RET_KILL_PROCESS);
  });

  it("refuses the denied list with its errno and allows what a sandbox needs", () => {
    for (const d of DENIED) {
      expect(run(prog, { nr: X86_64[d.name]!, arg0: refusedArg(d) }), d.name).toBe(SECCOMP_RET_ERRNO | d.errno);
    }
    expect(run(prog, { nr: X86_64.keyctl! })).toBe(SECCOMP_RET_ERRNO | 1);
    expect(run(prog, { nr: X86_64.io_uring_setup! })).toBe(SECCOMP_RET_ERRNO | 38);
    expect(run(prog, { nr: X86_64.fsopen! })).toBe(SECCOMP_RET_ERRNO | 38);
    // mount(2), umount2, pivot_root, unshare, setns, clone (without CLONE_NEWUSER), getpid; socket(AF_INET).
    for (const nr of [165, 166, 155, 272, 308, 56, 39]) expect(run(prog, { nr }), String(nr)).toBe(SECCOMP_RET_ALLOW);
    expect(run(prog, { nr: X86_64.socket!, arg0: 2 })).toBe(SECCOMP_RET_ALLOW);
    expect(run(prog, { nr: X86_64.socket!, arg0: 40 })).toBe(SECCOMP_RET_ERRNO | 1);
  });

  it("refuses a new user namespace by default: unshare and clone with CLONE_NEWUSER EPERM, clone3 ENOSYS", () => {
    const SIGCHLD = 17;
    const CLONE_NEWNS = 0x20000;
    const CLONE_NEWNET = 0x40000000;
    const threads = 0x3d0f00; // glibc pthread_create: VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|SETTLS|PARENT_SETTID|CHILD_CLEARTID
    expect(run(prog, { nr: X86_64.unshare!, arg0: CLONE_NEWUSER })).toBe(SECCOMP_RET_ERRNO | 1);
    expect(run(prog, { nr: X86_64.unshare!, arg0: CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWNS })).toBe(SECCOMP_RET_ERRNO | 1);
    expect(run(prog, { nr: X86_64.clone!, arg0: CLONE_NEWUSER | SIGCHLD })).toBe(SECCOMP_RET_ERRNO | 1);
    expect(run(prog, { nr: X86_64.clone3! })).toBe(SECCOMP_RET_ERRNO | 38);
    // Other namespaces (root inside holds CAP_SYS_ADMIN in its own), fork and threads stay open.
    expect(run(prog, { nr: X86_64.unshare!, arg0: CLONE_NEWNS | CLONE_NEWNET })).toBe(SECCOMP_RET_ALLOW);
    expect(run(prog, { nr: X86_64.clone!, arg0: SIGCHLD })).toBe(SECCOMP_RET_ALLOW);
    expect(run(prog, { nr: X86_64.clone!, arg0: threads })).toBe(SECCOMP_RET_ALLOW);
    // The high half is not read: clone(2) drops it, unshare(2) answers EINVAL to it (seccomp.ts).
    expect(run(prog, { nr: X86_64.clone!, arg0: SIGCHLD, arg0High: CLONE_NEWUSER })).toBe(SECCOMP_RET_ALLOW);
    expect(run(prog, { nr: X86_64.clone!, arg0: CLONE_NEWUSER, arg0High: 0xffffffff })).toBe(SECCOMP_RET_ERRNO | 1);

    const open = decode(sandboxFilter("x64", { nestedUserNamespaces: true }));
    for (const d of NEW_USER_NAMESPACE) expect(run(open, { nr: X86_64[d.name]!, arg0: CLONE_NEWUSER }), d.name).toBe(SECCOMP_RET_ALLOW);
    // Everything else is refused the same with the opt-in.
    for (const d of DENIED) expect(run(open, { nr: X86_64[d.name]!, arg0: refusedArg(d) }), d.name).toBe(SECCOMP_RET_ERRNO | d.errno);
  });

  it("lets personality(2) take Docker's values only", () => {
    for (const v of PERSONALITIES) expect(run(prog, { nr: X86_64.personality!, arg0: v }), v.toString(16)).toBe(SECCOMP_RET_ALLOW);
    for (const v of [ADDR_NO_RANDOMIZE, 0x0400000 /* READ_IMPLIES_EXEC */, 0x0100000 /* MMAP_PAGE_ZERO */, 0x9, 0x20009, 0x7fffffff]) {
      expect(run(prog, { nr: X86_64.personality!, arg0: v }), v.toString(16)).toBe(SECCOMP_RET_ERRNO | 1);
    }
  });

  it("has no table but x86_64's: another CPU is refused unless the filter is turned off", () => {
    expect(() => sandboxFilter("arm64")).toThrow(/no seccomp filter for arm64.*KRUISE_LOCAL_SECCOMP=off/);
    expect(seccompProgram({ KRUISE_LOCAL_SECCOMP: "off" })).toBeUndefined();
  });
});
