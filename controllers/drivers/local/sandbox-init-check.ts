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
// synchronous, and the init never exits by itself when it works. The helper gets a driver-made
// path and helperEnv() only.
import { spawnSync } from "node:child_process";
import { release } from "node:os";
import { helperEnv, PERL } from "./host-helpers.ts";

/** How long the init may take to show SIGCHLD ignored: milliseconds normally; bounded for a
 * machine so loaded that an exec takes seconds (the driver waits, synchronously, that long). */
const PROBE_MS = 10_000;

// Exit codes: 0 the init ran its steps; 126 the exec failed (its error on stderr); 3 the init
// exited by itself (a step failed: its exit(1)); 4 it did neither within the bound.
const PROBE = `
my ($file, $ms) = @ARGV;
my $pid = fork;
defined $pid or do { print STDERR "fork: $!\\n"; exit 2 };
if ($pid == 0) { exec { $file } 'init'; print STDERR "$!\\n"; exit 126 }
for (my $i = 0; $i < $ms; $i++) {
  if (waitpid($pid, 1) == $pid) { exit(($? >> 8) == 126 ? 126 : 3) }
  if (open(my $s, '<', "/proc/$pid/status")) {
    local $/;
    my $t = <$s> // '';
    if ($t =~ /^SigIgn:\\s*[0-9a-f]*([0-9a-f]{8})$/m && (hex($1) & (1 << 16))) { kill 9, $pid; waitpid($pid, 0); exit 0 }
  }
  select(undef, undef, undef, 0.001);
}
kill 9, $pid; waitpid($pid, 0); exit 4;
`;

/** Why the init at `file` cannot be a sandbox's pid 1 here, or undefined when it can. */
export function sandboxInitUnusable(file: string): string | undefined {
  const r = spawnSync(PERL, ["-e", PROBE, "--", file, String(PROBE_MS)], { env: helperEnv(), encoding: "utf8", stdio: ["ignore", "ignore", "pipe"], timeout: PROBE_MS + 5000 });
  const said = (r.stderr ?? "").trim().split("\n").at(-1)?.slice(0, 200) || "no message";
  switch (r.status) {
    case 0:
      return undefined;
    case 126:
      return `${file} cannot be executed (${said}): is the data dir on a file system mounted noexec?`;
    case 3:
      return `${file} failed its first steps: it needs Linux 5.9 or later (close_range), this is ${release()}`;
    case 4:
      return `${file} did not start within ${PROBE_MS / 1000} s`;
    default:
      return `the check of ${file} failed (${r.error?.message ?? `exit ${r.status ?? r.signal}`}: ${said})`;
  }
}
