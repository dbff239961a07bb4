// node-pty opens a terminal's master (/dev/ptmx) without close-on-exec, and Node has no fcntl to
// set the flag afterwards; libuv's spawn and node-pty's own fork close nothing they inherited. So
// every process this process starts while a terminal is open would hold that terminal's master:
// in a pod, a command run as `user` after a terminal opened as root could read root's screen and
// type into root's shell. This module keeps the masters open in this process and keeps them from
// every process started here (a command with pipes pays nothing while none is open; a terminal
// that changes user always pays the closer, below):
// - a command with pipes (child_process.spawn) gets /dev/null dup2'd over each master's number
//   by libuv itself (an explicit stdio slot), before it drops to the command's user, so the
//   master never reaches a process the user owns, and no extra process runs;
// - a terminal (node-pty, which takes no stdio) is exec'd through a closer, `perl -e`, that closes
//   every descriptor above stderr and then execs the command with argv unchanged (the same pid).
// The closer also switches user. node-pty's child does setgid/setuid without setgroups, so a
// terminal as `user` of a root runtime kept root's supplementary groups; and a closer already
// running as the command's user while it still held the masters could be ptraced by another
// process of that user (pidfd_getfd). So every terminal that changes user goes through it, started
// as this process's own user (node-pty is given no uid/gid): it closes the descriptors first, then
// sets the groups to the target gid alone, the gid, the uid, checks all of them (real, effective,
// saved, filesystem and the group list, from /proc/self/status) and execs. Once it has switched it
// is not dumpable until exec (the kernel's rule for a credential change), and it holds nothing.
// perl runs with an environment in which every one of the command's variables is renamed
// (`_KRUISE_ENV_<n>_NAME`), so nothing in it is read by perl or the loader (PERL5OPT,
// LD_PRELOAD...) while it is privileged or holds the masters; the closer restores them, in order,
// just before exec. The tenant's bytes are argv after `--` (only ever exec'd) and those values.
import { openSync } from "node:fs";
import type { StdioOptions } from "node:child_process";
import type { HostCommand } from "../sandbox-view.ts";

/** Each open master's number, with the token of the terminal that holds it. A master may be
 * closed before its terminal's exit is reported (a command that ignores SIGHUP and closes its
 * stdio keeps running after its master is gone), and the next terminal may get the same number:
 * the first one's report must not then untrack the second's. A stale entry costs only a
 * /dev/null slot or a closer; a lost one would hand a live master to every later process. */
const open = new Map<number, object>();

/** Records a terminal's master as open in this process; `closed` is called once it is closed. */
export function trackMaster(fd: unknown): () => void {
  // node-pty 1.1 keeps the master's number in `_fd`; without it the master could not be kept
  // from other processes, so the terminal is refused rather than leaked.
  if (typeof fd !== "number" || !Number.isInteger(fd) || fd <= 2) throw new Error(`cannot tell the terminal's master descriptor (${String(fd)})`);
  const token = {};
  open.set(fd, token);
  return () => {
    if (open.get(fd) === token) open.delete(fd);
  };
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
  for (const fd of open.keys()) {
    while (slots.length < fd) slots.push("ignore"); // "ignore" above stderr leaves the slot as it is
    if (slots[fd] === undefined || slots[fd] === null) slots[fd] = devNull;
  }
  return slots;
}

const PERL = "/usr/bin/perl";
const PREFIX = "_KRUISE_ENV_";

// No modules (POSIX alone costs ~10 ms). An fd that cannot be closed, or a switch of user that does
// not leave exactly the target's ids and group, fails the command rather than run it. The group
// list is the target gid alone: the view knows each user's uid and gid, not its memberships, and
// a command with pipes (libuv: setgroups(0)) has the same `id -G`. perl's `$)` takes "egid groups..."
// (setgroups, then setegid); `$(` then sets the real and saved gid; `$>` before `$<` leaves the
// saved uid the target's too (the other order keeps it root until exec), and the check says so. On exec failure it answers as
// node-pty's own child does.
const CLOSER = `
opendir(my $d, '/proc/self/fd') or do { print STDERR "closing inherited descriptors: $!\\n"; exit 1 };
my $own = fileno($d);
my @fds = grep { /\\A\\d+\\z/ && $_ > 2 && $_ != $own } readdir($d);
closedir($d);
for my $n (@fds) {
  open(my $h, '<&=', $n) or do { print STDERR "closing inherited descriptor $n: $!\\n"; exit 1 };
  close($h);
}
my ($uid, $gid) = splice(@ARGV, 0, 2);
if ($uid ne '-') {
  ($uid =~ /\\A\\d+\\z/ && $gid =~ /\\A\\d+\\z/) or do { print STDERR "switching user: bad uid/gid\\n"; exit 1 };
  $) = "$gid $gid";
  $( = $gid;
  $> = $uid;
  $< = $uid;
  my $st = '';
  if (open(my $s, '<', '/proc/self/status')) { local $/; $st = <$s> // ''; close($s); }
  unless ($< == $uid && $> == $uid && ($( . '') eq "$gid $gid" && ($) . '') eq "$gid $gid"
      && $st =~ /^Uid:\\t$uid\\t$uid\\t$uid\\t$uid\\n/m && $st =~ /^Gid:\\t$gid\\t$gid\\t$gid\\t$gid\\n/m && $st =~ /^Groups:\\t$gid ?\\n/m) {
    my ($u) = $st =~ /^(Uid:.*)$/m; my ($g) = $st =~ /^(Gid:.*)$/m; my ($l) = $st =~ /^(Groups:.*)$/m;
    print STDERR "switching to uid $uid gid $gid failed ($!): ", join('; ', map { $_ // '?' } $u, $g, $l), "\\n";
    exit 1;
  }
}
my @e = sort { $a->[0] <=> $b->[0] } map { /\\A${PREFIX}(\\d+)_(.*)\\z/s ? [$1, $2, $ENV{$_}] : () } keys %ENV;
%ENV = map { ($_->[1], $_->[2]) } @e;
exec { $ARGV[0] } @ARGV;
print STDERR "execvp(3) failed.: $!\\n";
exit 1;
`;

/** `host` exec'd through the closer. `env` is the environment the command itself must get (what
 * node-pty would have handed it); the closer's own holds it only under renamed variables. With
 * `as`, the closer switches to that uid and gid itself: the result has no uid/gid of its own, so
 * node-pty starts the closer as this process's user. */
export function throughCloser(host: HostCommand, env: Record<string, string>, as?: { uid: number; gid: number }): HostCommand {
  const renamed: Record<string, string> = {};
  let n = 0;
  for (const [name, value] of Object.entries(env)) renamed[`${PREFIX}${n++}_${name}`] = value;
  const ids = as ? [String(as.uid), String(as.gid)] : ["-", "-"];
  return { file: PERL, args: ["-e", CLOSER, "--", ...ids, host.file, ...host.args], cwd: host.cwd, env: renamed, sandboxEnv: host.sandboxEnv };
}

/** The uid and gid a command must switch to, when they are not this process's own. */
export function userSwitch(host: HostCommand): { uid: number; gid: number } | undefined {
  if (host.uid === undefined && host.gid === undefined) return undefined;
  const uid = host.uid ?? process.getuid!();
  const gid = host.gid ?? process.getgid!();
  return uid !== process.getuid!() || gid !== process.getgid!() ? { uid, gid } : undefined;
}
