#!/usr/bin/perl
# Lets setuid programs (sudo) work on a sandbox's root: bubblewrap mounts every bind `nosuid`, its
# `/` too. Enters the holder's user namespace (so it acts as that sandbox's root, with no
# capability on the host), then its mount namespace and root, and remounts `/` without nosuid
# (keeping nodev). Only for sandboxes with a user namespace of their own (userns.ts), where a
# setuid program gains root inside and nothing more. Usage (userns.pl runs it with `do` in a child
# it forks, at the driver's request; userns.ts):
#   allow-setuid.pl <holder pid> <setns nr> <mount nr>
# Runs as root in the host's namespaces; its environment is fixed and its arguments are numbers
# the driver computed. No modules (see enter.pl).

sub fail { print STDERR "allow-setuid.pl: $_[0]\n"; exit 127; }

my ($pid, $setns_nr, $mount_nr) = @ARGV;
for ($pid, $setns_nr, $mount_nr) { fail('bad arguments') unless defined $_ && /\A\d+\z/; }

opendir(my $root, "/proc/$pid/root") or fail("holder $pid: $!");
my @ns;
for my $n (qw(user mnt)) {
  open(my $fh, '<', "/proc/$pid/ns/$n") or fail("open $n namespace: $!");
  push @ns, [$n, $fh];
}
fail('the holder shares the host\'s user namespace') if readlink("/proc/$pid/ns/user") eq readlink('/proc/self/ns/user');
for my $e (@ns) { syscall($setns_nr, fileno($e->[1]), 0) == 0 or fail("setns $e->[0]: $!"); }
chdir($root) or fail("fchdir root: $!");
chroot('.') or fail("chroot: $!");
chdir('/') or fail("chdir /: $!");
# MS_REMOUNT | MS_BIND | MS_NODEV: nosuid goes, nodev stays.
my ($src, $target, $type, $data) = ('', '/', '', '');
syscall($mount_nr, $src, $target, $type, 0x20 | 0x1000 | 0x4, 0) == 0 or fail("remount /: $!");
exit 0;
