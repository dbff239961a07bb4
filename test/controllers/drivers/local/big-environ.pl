# Usage: perl big-environ.pl <sandbox id>
# Becomes a process whose environment, as /proc/<pid>/environ shows it, is 9 MiB with
# KRUISE_SANDBOX_ID=<id> last: PR_SET_MM_MAP (no capability needed) keeps every field
# /proc/self/stat shows and points the environment at a buffer of its own. Prints "ok", then sleeps.
# System calls by number (Perl has no prctl): prctl and brk per architecture; PR_SET_MM 35,
# PR_SET_MM_MAP 14; struct prctl_mm_map is the same on both 64-bit ones.
use strict;
use POSIX ();
my %nr = (x86_64 => [157, 12], aarch64 => [167, 214]);
my ($prctl, $brk_nr) = @{ $nr{(POSIX::uname())[4]} or die "big-environ.pl: no syscall numbers for " . (POSIX::uname())[4] . "\n" };
my $buf = "PAD=" . ("x" x (9 * 1024 * 1024)) . "\0KRUISE_SANDBOX_ID=$ARGV[0]\0";
my $addr = unpack("Q", pack("p", $buf));
open(my $f, "<", "/proc/self/stat") or die "stat: $!";
my $stat = <$f>;
close $f;
# Fields after the parenthesised command name start at field 3.
my @s = split / /, substr($stat, rindex($stat, ")") + 2);
my $field = sub { $s[$_[0] - 3] };
my $brk = syscall($brk_nr, 0);
# struct prctl_mm_map: start_code end_code start_data end_data start_brk brk start_stack arg_start
# arg_end env_start env_end, auxv (none), auxv_size, exe_fd (-1: unchanged).
my $map = pack("Q11 Q L L", $field->(26), $field->(27), $field->(45), $field->(46), $field->(47), $brk, $field->(28), $field->(48), $field->(49), $addr, $addr + length($buf), 0, 0, 0xffffffff);
syscall($prctl, 35, 14, $map, length($map), 0) == 0 or die "PR_SET_MM_MAP: $!";
$| = 1;
print "ok\n";
sleep 60;
