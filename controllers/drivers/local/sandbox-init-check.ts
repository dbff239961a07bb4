// The driver's one look, at its start, at whether the sandbox's init (sandbox-init.ts) can run on
// this host: it needs Linux 5.9 or later (close_range, its first call) and a data dir it can be
// exec'd from (a file system mounted noexec refuses the exec, through a descriptor too). Either
// failing made every `bwrap` sandbox's start fail, each with its own error; looked at once, the
// driver instead starts holders of the shape before the init (bwrap's own pid 1 over `sleep
// infinity`, as on a CPU with no image) and says why, once.
//
// It runs the init itself, as the holder does: a fork of a perl helper execs the file, and the
// helper waits for SIGCHLD to show as ignored (the init's second step, after close_range) or for
// the init to exit (a failed step), then kills it. perl, not Node: the driver's constructor is
// synchronous, and the init never exits by itself when it works. The helper's wait is bounded by
// the clock (whole seconds: core perl has no finer clock without Time::HiRes, which perl-base
// lacks), and a SIGTERM (spawnSync's timeout) makes it kill the init first: an init left behind
// would be a host-root process nobody reaps. The helper gets a driver-made path and helperEnv()
// only.
import { spawnSync } from "node:child_process";
import { release } from "node:os";
import { helperEnv, PERL } from "./host-helpers.ts";

/** How long the init may take to show SIGCHLD ignored: milliseconds normally; bounded for a
 * machine so loaded that an exec takes seconds (the driver waits, synchronously, that long). */
const PROBE_MS = 10_000;

// Exit codes: 0 the init ran its steps; 126 the exec was refused with EACCES (a noexec mount, or
// no execute bit); 3 the init exited by itself with status 1 (its exit(1): a step failed, as
// close_range on a kernel before 5.9); 4 it did neither within the bound; 5 the exec failed
// otherwise (ETXTBSY, ENOMEM, ..., its error on stderr); 6 the init ended otherwise (a signal);
// 2 the fork failed.
const PROBE = `
my ($file, $ms) = @ARGV;
my $pid = fork;
defined $pid or do { print STDERR "fork: $!\\n"; exit 2 };
if ($pid == 0) { exec { $file } 'init'; my $denied = $!{EACCES}; print STDERR "$!\\n"; exit($denied ? 126 : 5) }
$SIG{TERM} = sub { kill 9, $pid; waitpid($pid, 0); exit 4 };
my $end = time + int($ms / 1000) + 1;
while (time < $end) {
  if (waitpid($pid, 1) == $pid) {
    my $code = $? >> 8;
    exit(($? & 127) ? 6 : $code == 126 || $code == 5 ? $code : $code == 1 ? 3 : 6);
  }
  if (open(my $s, '<', "/proc/$pid/status")) {
    local $/;
    my $t = <$s> // '';
    if ($t =~ /^SigIgn:\\s*[0-9a-f]*([0-9a-f]{8})$/m && (hex($1) & (1 << 16))) { kill 9, $pid; waitpid($pid, 0); exit 0 }
  }
  select(undef, undef, undef, 0.001);
}
kill 9, $pid; waitpid($pid, 0); exit 4;
`;

/** One run of the check: `unusable` says a cause that stays (a noexec data dir, an old kernel),
 * `unsure` a failure that says nothing about the host (a fork or exec that failed for a passing
 * reason, an init killed, no answer in time on a loaded machine). */
type Probe = { usable: true } | { unusable: string } | { unsure: string };

function probeOnce(file: string, ms: number): Probe {
  const r = spawnSync(PERL, ["-e", PROBE, "--", file, String(ms)], { env: helperEnv(), encoding: "utf8", stdio: ["ignore", "ignore", "pipe"], timeout: ms + 5000 });
  const said = (r.stderr ?? "").trim().split("\n").at(-1)?.slice(0, 200) || "no message";
  switch (r.status) {
    case 0:
      return { usable: true };
    case 126:
      return { unusable: `${file} cannot be executed (${said}): is the data dir on a file system mounted noexec?` };
    case 3:
      return { unusable: `${file} failed its first steps: it needs Linux 5.9 or later (close_range), this is ${release()}` };
    case 4:
      return { unsure: `${file} did not start within ${ms / 1000} s` };
    case 5:
      return { unsure: `${file} could not be executed (${said})` };
    case 6:
      return { unsure: `${file} ended before its first steps were seen, not by its own exit(1)` };
    default:
      return { unsure: `the check of ${file} failed (${r.error?.message ?? `exit ${r.status ?? r.signal}`}: ${said})` };
  }
}

/** What the driver does with the init at `file`: `unusable`, why it cannot be a sandbox's pid 1
 * here (the driver falls back to bwrap's own); `unsure`, why the check could not tell, twice (the
 * driver keeps the init: a passing failure must not downgrade every sandbox for the agent's life;
 * if the init truly cannot run, each sandbox's start fails saying why, as before the check);
 * neither, it can. Only the two causes the check is for fall back: an exec refused with EACCES and
 * the init's own exit(1). Anything else is looked at once more. */
export function checkSandboxInit(file: string, opts: { ms?: number } = {}): { unusable?: string; unsure?: string } {
  const ms = opts.ms ?? PROBE_MS;
  let r = probeOnce(file, ms);
  if ("unsure" in r) r = probeOnce(file, ms);
  return "usable" in r ? {} : r;
}
