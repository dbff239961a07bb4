// The sandbox's pid 1 at `bwrap` levels (README.md "The sandbox's pid 1"): a program of the host's
// that no process of the sandbox can end, and that reaps its orphans. bwrap's own pid 1 exits with
// its first child, which the tenant may kill (`pkill sleep`, `kill -9 -1`), and a template's
// binary may be anything; so bwrap execs this one as pid 1 itself (`--as-pid-1`), through a
// descriptor the spawner opened on the host (holder.ts).
//
// Why it cannot be ended from inside: the kernel drops every signal a process of the namespace
// sends its pid 1 for which pid 1 has no handler, SIGKILL and SIGSTOP included, and this one
// installs none. Its file is the host root's and execute-only, so at exec the kernel makes the
// process non-dumpable with its memory owned by the host's user namespace (fs/exec.c
// would_dump): ptrace, /proc/1/mem, environ and fd need CAP_SYS_PTRACE there, which no process of
// the sandbox has. (The host may still kill it, and the OOM killer: the driver restarts a pid 1
// that ends.)
// Why no zombie stays: SIGCHLD set to SIG_IGN makes the kernel reap every child of pid 1 as it
// exits, orphans re-parented to it included (kernel/signal.c do_notify_parent), with no wait loop.
//
// The program, as GNU as assembles it (x86-64; `as init.s && objcopy -O binary -j .text`):
//     xor edi, edi; mov esi, -1; xor edx, edx; mov eax, 436; syscall  # close_range(0, ~0, 0):
//     test eax, eax; jnz fail          # nothing of bwrap's (its --userns descriptor) stays open
//     mov edi, 17; lea rsi, [rip+act]; xor edx, edx; mov r10d, 8
//     mov eax, 13; syscall             # rt_sigaction(SIGCHLD, {SIG_IGN}, NULL, 8)
//     test eax, eax; jnz fail
//     mov edi, 15; lea rsi, [rip+name]; mov eax, 157; syscall  # prctl(PR_SET_NAME, "init"): its
//                                  # name in `ps` (its command line is bwrap's path of it)
//   loop: mov eax, 34; syscall; jmp loop                     # pause() forever
//   fail: mov edi, 1; mov eax, 60; syscall                   # exit(1): the start fails, loudly
//   act: .quad 1, 0, 0, 0                                    # SIG_IGN, no flags, restorer, mask
//   name: .asciz "init"
// One load segment, read and execute, no writable memory, no stack use; 128 bytes of code and data.

const X86_64_CODE =
  "31ffbeffffffff31d2b8b40100000f0585c0753bbf11000000488d353b00000031d241ba08000000b80d0000000f05" +
  "85c0751cbf0f000000488d353c000000b89d0000000f05b8220000000f05ebf7bf01000000b83c0000000f0501000000" +
  "00000000000000000000000000000000000000000000000000000000696e697400";

const BASE = 0x400000n;
const EHDR = 64;
const PHDR = 56;

/** The init's ELF image for a CPU (Node's `os.arch()` name), or undefined for one it has none for
 * (the holder then keeps bwrap's own pid 1 over `sleep infinity`, which its tenant can end). */
export function sandboxInitImage(cpu: string): Buffer | undefined {
  if (cpu !== "x64") return undefined;
  const code = Buffer.from(X86_64_CODE, "hex");
  const head = EHDR + 2 * PHDR;
  const elf = Buffer.alloc(head + code.length);
  elf.set([0x7f, 0x45, 0x4c, 0x46, 2 /* 64-bit */, 1 /* little-endian */, 1 /* version */], 0);
  elf.writeUInt16LE(2, 16); // ET_EXEC
  elf.writeUInt16LE(0x3e, 18); // EM_X86_64
  elf.writeUInt32LE(1, 20);
  elf.writeBigUInt64LE(BASE + BigInt(head), 24); // entry: the code, after the headers
  elf.writeBigUInt64LE(BigInt(EHDR), 32); // program headers
  elf.writeUInt16LE(EHDR, 52);
  elf.writeUInt16LE(PHDR, 54);
  elf.writeUInt16LE(2, 56);
  // PT_LOAD: the whole file at BASE, read + execute.
  elf.writeUInt32LE(1, EHDR);
  elf.writeUInt32LE(5, EHDR + 4);
  elf.writeBigUInt64LE(BASE, EHDR + 16);
  elf.writeBigUInt64LE(BASE, EHDR + 24);
  elf.writeBigUInt64LE(BigInt(elf.length), EHDR + 32);
  elf.writeBigUInt64LE(BigInt(elf.length), EHDR + 40);
  elf.writeBigUInt64LE(0x1000n, EHDR + 48);
  // PT_GNU_STACK, read + write: a stack that is not executable.
  elf.writeUInt32LE(0x6474e551, EHDR + PHDR);
  elf.writeUInt32LE(6, EHDR + PHDR + 4);
  elf.writeBigUInt64LE(0x10n, EHDR + PHDR + 48);
  code.copy(elf, head);
  return elf;
}

/** The mode of the init's file: execute only, so a process that execs it is not dumpable (above). */
export const SANDBOX_INIT_MODE = 0o111;
