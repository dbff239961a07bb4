// node-pty opens a terminal's master (/dev/ptmx) without close-on-exec, and Node has no fcntl to
// set the flag afterwards; libuv's spawn and node-pty's own fork close nothing they inherited. So
// every process this process starts while a terminal is open would hold that terminal's master:
// in a pod, a command run as `user` after a terminal opened as root could read root's screen and
// type into root's shell. This module keeps the masters open in this process and keeps them from
// every process started here, at no cost while none is open:
// - a command with pipes (child_process.spawn) gets /dev/null dup2'd over each master's number
//   by libuv itself (an explicit stdio slot), before it drops to the command's user, so the
//   master never reaches a process the user owns, and no extra process runs;
// - a terminal (node-pty, which takes no stdio) is exec'd through a closer, `perl -e`, that closes
//   every descriptor above stderr and then execs the command with argv unchanged (the same pid).
//   perl runs as the command's user with an environment in which every one of the command's
//   variables is renamed (`_KRUISE_ENV_<n>_NAME`), so nothing in it is read by perl or the loader
//   (PERL5OPT, LD_PRELOAD...) while the masters are still open; the closer restores them, in
//   order, just before exec.
// Residual: for the ~2 ms perl runs, a process of the same user allowed to ptrace it (no Yama
// restriction) could take a master with pidfd_getfd; without the closer it held it for its life.
import { openSync } from "node:fs";
import type { StdioOptions } from "node:child_process";
import type { HostCommand } from "../sandbox-view.ts";

const open = new Set<number>();

/** Records a terminal's master as open in this process; `closed` is called once it is closed. */
export function trackMaster(fd: unknown): () => void {
  // node-pty 1.1 keeps the master's number in `_fd`; without it the master could not be kept
  // from other processes, so the terminal is refused rather than leaked.
  if (typeof fd !== "number" || !Number.isInteger(fd) || fd <= 2) throw new Error(`cannot tell the terminal's master descriptor (${String(fd)})`);
  open.add(fd);
  return () => void open.delete(fd);
}

export function mastersOpen(): number {
  return open.size;
}

let devNull: number | undefined;

/** `stdio` with /dev/null in the slot of every open master (libuv dup2s it there in the child).
 * A slot the caller set already is its own choice and is left alone. */
export function stdioWithoutMasters(stdio: StdioOptions): StdioOptions {
  if (open.size === 0) return stdio;
  const slots: Array<Exclude<StdioOptions, string>[number]> = typeof stdio === "string" ? [stdio, stdio, stdio] : stdio.slice();
  // Opened once, close-on-exec in this process; a child holds it only at the masters' numbers.
  devNull ??= openSync("/dev/null", "r");
  for (const fd of open) {
    while (slots.length < fd) slots.push("ignore"); // "ignore" above stderr leaves the slot as it is
    if (slots[fd] === undefined || slots[fd] === null) slots[fd] = devNull;
  }
  return slots;
}

const PERL = "/usr/bin/perl";
const PREFIX = "_KRUISE_ENV_";

// No modules (POSIX alone costs ~10 ms). An fd that cannot be closed fails the command rather
// than reach it. On exec failure it answers as node-pty's own child does.
const CLOSER = `
opendir(my $d, '/proc/self/fd') or do { print STDERR "closing inherited descriptors: $!\\n"; exit 1 };
my $own = fileno($d);
my @fds = grep { /\\A\\d+\\z/ && $_ > 2 && $_ != $own } readdir($d);
closedir($d);
for my $n (@fds) {
  open(my $h, '<&=', $n) or do { print STDERR "closing inherited descriptor $n: $!\\n"; exit 1 };
  close($h);
}
my @e = sort { $a->[0] <=> $b->[0] } map { /\\A${PREFIX}(\\d+)_(.*)\\z/s ? [$1, $2, $ENV{$_}] : () } keys %ENV;
%ENV = map { ($_->[1], $_->[2]) } @e;
exec { $ARGV[0] } @ARGV;
print STDERR "execvp(3) failed.: $!\\n";
exit 1;
`;

/** `host` exec'd through the closer. `env` is the environment the command itself must get (what
 * node-pty would have handed it); the closer's own holds it only under renamed variables. */
export function throughCloser(host: HostCommand, env: Record<string, string>): HostCommand {
  const renamed: Record<string, string> = {};
  let n = 0;
  for (const [name, value] of Object.entries(env)) renamed[`${PREFIX}${n++}_${name}`] = value;
  return { ...host, file: PERL, args: ["-e", CLOSER, "--", host.file, ...host.args], env: renamed };
}
