#!/usr/bin/perl
# Lets setuid programs (sudo) work on a sandbox's root: bubblewrap mounts every bind `nosuid`, its
# `/` too. Enters the holder's user namespace (so it acts as that sandbox's root, with no
# capability on the host), then its mount namespace and root, and remounts `/` without nosuid
# (keeping nodev). Only for sandboxes with a user namespace of their own (userns.ts), where a
# setuid program gains root inside and nothing more. Usage (userns.pl runs it with `do` in a child
# it forks, at the driver's request; userns.ts):
#   allow-setuid.pl <holder pid>:<its start time> <setns nr> <mount nr>
# Runs as root in the host's namespaces; its environment is fixed and its arguments are numbers
# the driver computed. No modules (see enter.pl).

sub fail { print STDERR "allow-setuid.pl: $_[0]\n"; exit 127; }

my ($target, $setns_nr, $mount_nr) = @ARGV;
for ($setns_nr, $mount_nr) { fail('bad arguments') unless defined $_ && /\A\d+\z/; }
fail('bad arguments') unless defined $target && $target =~ /\A([1-9][0-9]{0,9}):([0-9]{1,20})\z/;
my ($pid, $start) = ($1, $2);

# The holder's root and namespaces through one handle on its /proc directory, checked for the
# recorded start time, never by its pid again (enter.pl has the whole reason): had the holder
# ended and a host process taken its pid, `/proc/<pid>/ns/user` could be another user namespace,
# and this would remount that one's `/`.
opendir(my $pd, "/proc/$pid") or fail("holder $pid: $!");
my $proc = '/proc/self/fd/' . fileno($pd);
open(my $sf, '<', "$proc/stat") or fail("holder $pid: $!");
my $stat = do { local $/; <$sf> } // '';
close($sf);
my @f = split / /, substr($stat, rindex($stat, ')') + 2);
fail("holder $pid is another process now") unless defined $f[19] && $f[19] eq $start;
opendir(my $root, "$proc/root") or fail("holder $pid: $!");
my @ns;
for my $n (qw(user mnt)) {
  open(my $fh, '<', "$proc/ns/$n") or fail("open $n namespace: $!");
  push @ns, [$n, $fh];
}
fail('the holder shares the host\'s user namespace') if (readlink("$proc/ns/user") // fail("holder $pid: $!")) eq readlink('/proc/self/ns/user');
for my $e (@ns) { syscall($setns_nr, fileno($e->[1]), 0) == 0 or fail("setns $e->[0]: $!"); }
chdir($root) or fail("fchdir root: $!");
chroot('.') or fail("chroot: $!");
chdir('/') or fail("chdir /: $!");
# MS_REMOUNT | MS_BIND | MS_NODEV: nosuid goes, nodev stays.
my ($src, $mnt_target, $type, $data) = ('', '/', '', '');
syscall($mount_nr, $src, $mnt_target, $type, 0x20 | 0x1000 | 0x4, 0) == 0 or fail("remount /: $!");
exit 0;
