// What the local driver's test files share: a desired sandbox with the usual defaults, a shell
// inside it as the template's user, and the teardown that leaves no sandbox or data dir behind.
import { spawn } from "node:child_process";
import { rmSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { expect, vi } from "vitest";
import type { DesiredSandbox } from "../../../../controllers/drivers/driver.ts";
import { PERL, syscallNumbers } from "../../../../controllers/drivers/local/host-helpers.ts";
import type { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import type { SandboxUser } from "../../../../controllers/runtime/sandbox-view.ts";

export const USER: SandboxUser = { name: "user", uid: 1000, gid: 1000, home: "/home/user", shell: "/bin/bash" };

let seq = 0;

/** A running 1-CPU, 256 MB `base` sandbox with a fresh id starting with `prefix`. */
export function desiredSandbox(prefix: string, over: Partial<DesiredSandbox> = {}): DesiredSandbox {
  return { id: `${prefix}${process.pid}x${seq++}`, generation: 1, template: "base", state: "Running", pauseStrategy: "Freeze", resources: { cpuCount: 1, memoryMB: 256 }, allowInternetAccess: false, ...over };
}

/** `script` under bash inside the sandbox, as `user`. */
export function shIn(driver: LocalDriver, id: string, script: string, user = USER) {
  return driver.exec(id, { cmd: "/bin/bash", args: ["-c", script], cwd: user.home, env: { PATH: "/usr/bin:/bin" }, user }, { timeoutMs: 20_000 });
}

/** `fn`'s value once `ok` holds, or its last one when `ms` are up (for the caller's assertion to
 * show, or to be the point: a count that must stay below a cap). */
export async function pollUntil<T>(fn: () => Promise<T> | T, ok: (v: T) => boolean, ms = 10_000): Promise<T> {
  let v = await fn();
  for (const deadline = Date.now() + ms; !ok(v) && Date.now() < deadline; await sleep(100)) v = await fn();
  return v;
}

/** Destroys every sandbox of the driver, stops it and removes its data dir. */
export async function destroyAll(driver: LocalDriver, dataDir: string): Promise<void> {
  for (const s of await driver.list()) await driver.destroy(s.id);
  await driver.dispose();
  rmSync(dataDir, { recursive: true, force: true });
}

/** Stops `old` and lets `next` (a new driver on its data directory) converge the warm member
 * `warm` and the claimed `claimed` an older agent started, as an agent restart does: the warm one
 * reads as new when its holder was replaced, the claimed one as adopted, and a second pass says
 * nothing more. Answers what `next` logged as warnings. */
export async function adoptAfterRestart(old: LocalDriver, next: () => LocalDriver, warm: DesiredSandbox, claimed: DesiredSandbox): Promise<{ driver: LocalDriver; warnings: string[] }> {
  const createdAt = { warm: (await old.observe(warm.id))!.createdAt, claimed: (await old.observe(claimed.id))!.createdAt };
  await old.dispose();
  const driver = next();
  const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
  try {
    // The replaced warm member reads as new (not adopted: its template's start command runs again).
    expect((await driver.ensure({ ...warm, generation: 2 })).createdAt > createdAt.warm).toBe(true);
    expect((await driver.ensure({ ...claimed, generation: 2 })).createdAt).toBe(createdAt.claimed);
    // Looked at once per driver start: a second pass says nothing more.
    await driver.ensure({ ...claimed, generation: 3 });
    return { driver, warnings: warn.mock.calls.map((c) => String(c[0])) };
  } finally {
    warn.mockRestore();
  }
}

/** A process given a chosen pid (`takePid`): the ChildProcess fields the tests read. */
export interface Squatter {
  readonly pid: number;
  kill(signal: NodeJS.Signals): void;
  /** Null while it runs (its perl parent mirrors how it ended). */
  readonly exitCode: number | null;
  readonly signalCode: NodeJS.Signals | null;
}

/** clone3(2) with `set_tid` (5.5+): the child gets exactly the pid asked for in this (the host's)
 * pid namespace, or the call fails (EEXIST while another process has it: retried briefly, as an
 * ended pid 1 may not be reaped yet). Nothing host-wide is written: `ns_last_pid`, the namespace's
 * counter every fork of the machine draws from, is neither set nor moved (a chosen pid is not
 * allocated cyclically), and no other process can take the pid in between. Needs CAP_SYS_ADMIN
 * (the local tier runs as root). Its number comes from host-helpers.ts's table, as the helpers' do. The
 * parent stays, waits and ends as the child did, so the caller sees an exit like a child's. */
const CLONE3_SET_TID = String.raw`
use strict;
my ($clone3, $pid, @argv) = @ARGV;
my $tids = pack("l", $pid);
# struct clone_args (VER1, 80 bytes): flags, pidfd, child_tid, parent_tid, exit_signal (SIGCHLD),
# stack, stack_size, tls, set_tid (a pointer to one pid_t), set_tid_size.
my $args = pack("Q10", 0, 0, 0, 0, 17, 0, 0, 0, unpack("Q", pack("p", $tids)), 1);
# Close-on-exec (perl sets FD_CLOEXEC above $^F): EOF on $r means the child has exec'd, as libuv's
# spawn waits; a byte means the exec failed. Printing the pid earlier let a caller read the
# squatter while it was still a copy of perl (its comm "perl" about 1 time in 3).
pipe(my $r, my $w) or die "pipe: $!\n";
my $child = -1;
for (1 .. 100) {
  $child = syscall($clone3, $args, length $args);
  last if $child >= 0 || !$!{EEXIST};
  select(undef, undef, undef, 0.02);
}
die "clone3 set_tid $pid: $!\n" if $child < 0;
if ($child == 0) { close $r; exec { $argv[0] } @argv; syswrite($w, "x"); require POSIX; POSIX::_exit(127); }
close $w;
my $got = sysread($r, my $b, 1);
close $r;
die "exec $argv[0]: failed\n" if $got;
$SIG{$_} = sub { kill $_[0], $child } for qw(TERM INT HUP);
$| = 1;
print "$child\n";
waitpid($child, 0);
my $status = $?;
if ($status & 127) { $SIG{$_} = "DEFAULT" for qw(TERM INT HUP); kill $status & 127, $$; }
exit($status >> 8);
`;

/** A host process with pid `pid` (`argv`, default a `sleep`; one that execs keeps the pid): what a
 * host process that takes an ended sandbox pid 1's pid looks like. Made with clone3's `set_tid`
 * (CLONE3_SET_TID), not by writing `/proc/sys/kernel/ns_last_pid`: that counter is the whole
 * host's, so other processes' forks (other test files, the machine) could take the pid first, and
 * every fork on the host was moved by the write. Undefined when the pid stays taken. */
export async function takePid(pid: number, argv = ["/usr/bin/sleep", "300"]): Promise<Squatter | undefined> {
  const parent = spawn(PERL, ["-e", CLONE3_SET_TID, String(syscallNumbers().clone3), String(pid), ...argv], { stdio: ["ignore", "pipe", "inherit"] });
  const line = await new Promise<string>((resolve) => {
    let out = "";
    parent.stdout!.on("data", (b: Buffer) => {
      out += b.toString("latin1");
      if (out.includes("\n")) resolve(out);
    });
    parent.once("exit", () => resolve(out));
  });
  if (Number(line.trim()) !== pid) {
    parent.kill("SIGKILL");
    return undefined;
  }
  return {
    pid,
    // Only while the perl parent has not reaped it: a squatter that already died (the failure a test
    // is about to report) must not throw ESRCH from a finally and hide that failure, and once reaped
    // its pid may belong to another process.
    kill: (signal) => {
      if (parent.exitCode !== null || parent.signalCode !== null) return;
      try {
        process.kill(pid, signal);
      } catch {
        // ended between the check and the kill
      }
    },
    get exitCode() {
      return parent.exitCode;
    },
    get signalCode() {
      return parent.signalCode;
    },
  };
}
