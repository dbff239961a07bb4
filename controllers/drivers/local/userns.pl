#!/usr/bin/perl
# Makes a user namespace that maps uid and gid 0..<count>-1 to <base>..<base>+<count>-1 on the
# host, and ID-mapped mounts through it. Usage (built by userns.ts):
#   userns.pl <base> <count> <unshare nr> <open_tree nr> <mount_setattr nr> <move_mount nr>
#             [<source dir> <target dir>]... [overlay <mount nr> <dir> <options> <merged dir>]
#             [volatile <mount nr> <umount2 nr> <dir> <size MiB> <inodes>]
#   userns.pl reverse <base> <count> <unshare nr> <open_tree nr> <mount_setattr nr> <move_mount nr>
#             <source dir> <target dir>...
#
# Each <source dir> is cloned (open_tree), made read-only and ID-mapped with the namespace's
# mapping (mount_setattr MOUNT_ATTR_IDMAP), and attached at <target dir> (move_mount): files owned
# by host uid 0 there appear owned by <base>, which is root inside a sandbox with that mapping,
# without a copy. The mount keeps the mapping, not the namespace, so any namespace with the same
# mapping sees the same owners.
# With `overlay`, it then mounts the sandbox's root on those: overlayfs at <merged dir> with
# <options> (lowerdir=layers/0,...), whose relative paths are resolved from <dir>, the sandbox's
# directory. The same mount(2) `mount -t overlay` makes, without a process of its own per create
# (an exec of mount(8) and a spawn through the spawner: ~2 ms of the spawner's and agent's CPU).
# With `volatile`, it mounts a fresh tmpfs of <size MiB> and <inodes> at <dir> (nosuid, nodev; one
# is detached first: its files go as a reboot's /run and /dev/shm do) holding `shm` (1777) and
# `run` (0755) owned by <base>, which bwrap binds at the sandbox's /dev/shm and /run. Mounted here,
# in the host's user namespace, not by bwrap inside the sandbox's: the kernel refuses a create
# (EOVERFLOW, fs/namei.c may_create) by a caller whose fsuid the file system's user namespace does
# not map, and the files API creates as the host's root (local-driver README, "/dev/shm and /run").
# Then it prints the pid of a process inside the namespace and keeps it alive until its stdin
# ends, so the caller can hand /proc/<pid>/ns/user to bwrap (`--userns`) meanwhile; requests on
# stdin meanwhile (see below) run allow-setuid.pl for the holder that joined it.
#
# With `reverse` (a template build step's upper directory, copied off into its layer: builder/
# sandbox.ts), the mapping goes the other way: ids <base>..<base>+<count>-1 inside are host
# 0..<count>-1, so files the step's root wrote (host <base>) appear owned by 0 at <target dir>,
# and a copy from there makes a layer owned as any other. Its namespace stays host root's (no
# drop to <base>): the step's own uid must hold no capability over a namespace that maps host root.
#
# Runs as root in the host's namespaces. The driver fixes its environment (host-helpers.ts) and
# builds every argument (numbers it computed, directories under its own data directory and the
# template store); nothing a tenant sent is among them. No modules (see enter.pl).

sub fail { print STDERR "userns.pl: $_[0]\n"; exit 127; }

sub main {
  my $reverse = @ARGV && $ARGV[0] eq 'reverse' ? shift(@ARGV) : undef;
  my ($base, $count, $unshare_nr, $open_tree_nr, $setattr_nr, $move_nr, @pairs) = @ARGV;
  for ($base, $count, $unshare_nr, $open_tree_nr, $setattr_nr, $move_nr) {
    fail('bad arguments') unless defined $_ && /\A\d+\z/;
  }
  # The pairs' paths are absolute and the overlay's options start `lowerdir=`, so the words
  # `volatile` and `overlay` among them start their groups (volatile last).
  my ($vat) = grep { $pairs[$_] eq 'volatile' } 0 .. $#pairs;
  my @volatile = defined $vat ? splice(@pairs, $vat) : ();
  if (@volatile) {
    my (undef, $mount_nr, $umount_nr, $vdir, $size, $inodes) = @volatile;
    fail('bad arguments') unless @volatile == 6 && $mount_nr =~ /\A\d+\z/ && $umount_nr =~ /\A\d+\z/ && $vdir =~ m{\A/[^\n]*\z}
      && $size =~ /\A[1-9]\d{0,8}\z/ && $inodes =~ /\A[1-9]\d{0,9}\z/;
  }
  my ($at) = grep { $pairs[$_] eq 'overlay' } 0 .. $#pairs;
  my @overlay = defined $at ? splice(@pairs, $at) : ();
  if (@overlay) {
    my (undef, $mount_nr, $dir, $options, $merged) = @overlay;
    fail('bad arguments') unless @overlay == 5 && $mount_nr =~ /\A\d+\z/ && $dir =~ m{\A/} && $merged =~ m{\A/} && $options =~ /\Alowerdir=[^\s]+\z/;
  }
  fail('bad arguments') if @pairs % 2 || $count < 1 || $base < 1 || $base + $count > 4294967295;
  fail('bad arguments') if $reverse && (@overlay || @volatile || $base < $count);

  pipe(my $ready_r, my $ready_w) or fail("pipe: $!");
  pipe(my $hold_r, my $hold_w) or fail("pipe: $!");
  my $child = fork();
  fail("fork: $!") unless defined $child;
  if ($child == 0) {
    close($ready_r);
    close($hold_w);
    # The namespace's owner is the creator's euid: <base>, the sandbox's own root, never host root
    # (a reverse one stays host root's: it maps host root).
    if (!$reverse) {
      $) = "$base $base";
      $( = $base;
      ($<, $>) = ($base, $base);
      if ($< != $base || $> != $base) { print $ready_w "setuid: $!\n"; exit 1; }
    }
    syscall($unshare_nr, 0x10000000) == 0 or do { print $ready_w "unshare: $!\n"; exit 1; };  # CLONE_NEWUSER
    print $ready_w "ok\n";
    close($ready_w);
    my $b;
    sysread($hold_r, $b, 1);  # until the parent goes
    exit 0;
  }
  close($ready_w);
  close($hold_r);
  my $line = <$ready_r>;
  fail("child: " . ($line // "no answer")) unless defined $line && $line eq "ok\n";

  for my $map (qw(uid_map gid_map)) {
    open(my $fh, '>', "/proc/$child/$map") or fail("open $map: $!");
    print $fh $reverse ? "$base 0 $count\n" : "0 $base $count\n";
    close($fh) or fail("write $map: $!");
  }
  open(my $ns, '<', "/proc/$child/ns/user") or fail("open user namespace: $!");

  while (my ($src, $dst) = splice(@pairs, 0, 2)) {
    # AT_FDCWD, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC
    my $fd = syscall($open_tree_nr, -100, $src, 1 | 0x80000);
    fail("open_tree $src: $!") if $fd < 0;
    # struct mount_attr { attr_set, attr_clr, propagation, userns_fd }: MOUNT_ATTR_IDMAP | RDONLY
    # | NOSUID | NODEV. These mounts sit in the host's mount namespace, under directories other uids
    # may pass: a device node or setuid file a build step left in a layer must be inert through
    # them (the sandbox reaches its files through the overlay, whose own flags decide).
    my $attr = pack('QQQQ', 0x00100000 | 1 | 2 | 4, 0, 0, fileno($ns));
    my ($empty1, $empty2) = ('', '');  # syscall() may write into string arguments: not literals
    syscall($setattr_nr, $fd, $empty1, 0x1000, $attr, length($attr)) == 0 or fail("mount_setattr $src: $!");  # AT_EMPTY_PATH
    syscall($move_nr, $fd, $empty2, -100, $dst, 4) == 0 or fail("move_mount $dst: $!");  # MOVE_MOUNT_F_EMPTY_PATH
    POSIX_close($fd);
  }
  if (@overlay) {
    my (undef, $mount_nr, $dir, $options, $merged) = @overlay;
    chdir($dir) or fail("chdir $dir: $!");
    my ($source, $type) = ('overlay', 'overlay');  # syscall() may write into string arguments
    # MS_NODEV: the layers are the tenant's (a build step runs as root and may mknod), and the
    # agent opens paths under this mount as the host's root (the files API, /etc/passwd): a node
    # there must not reach a host device. Not MS_NOSUID: allow-setuid.pl lifts bubblewrap's nosuid
    # inside, which a locked flag from here would forbid.
    syscall($mount_nr, $source, $merged, $type, 4, $options) == 0 or fail("mount overlay at $merged: $!");
    chdir('/') or fail("chdir /: $!");
  }
  if (@volatile) {
    my (undef, $mount_nr, $umount_nr, $vdir, $size, $inodes) = @volatile;
    # MNT_DETACH, until nothing is mounted there (EINVAL)
    for (1 .. 8) { last if syscall($umount_nr, $vdir, 2) != 0; }
    # Bounded: the files API writes here as the shared runtime, charged to no sandbox's memory
    # cgroup (userns.ts volatileBounds).
    my ($source, $type, $options) = ('tmpfs', 'tmpfs', "mode=0710,uid=0,gid=$base,size=${size}m,nr_inodes=$inodes");
    # MS_NOSUID | MS_NODEV, as bwrap's own tmpfs were: the agent opens paths here as the host's root.
    syscall($mount_nr, $source, $vdir, $type, 2 | 4, $options) == 0 or fail("mount tmpfs at $vdir: $!");
    for ([shm => 01777], [run => 0755]) {
      my ($d, $mode) = ("$vdir/$_->[0]", $_->[1]);
      mkdir($d, 0700) or fail("mkdir $d: $!");
      chown($base, $base, $d) or fail("chown $d: $!");
      chmod($mode, $d) or fail("chmod $d: $!");
    }
  }

  $| = 1;
  print "$child\n";
  # Requests from the driver until its stdin ends, one a line, each answered "ok" or the reason:
  #   allow-setuid <holder pid>:<its start time> <setns nr> <mount nr>
  # runs allow-setuid.pl in a child forked here (this process is already started, as root in the
  # host's namespaces, as a new perl for that script would be): one perl start fewer per sandbox.
  (my $dir = $0) =~ s{/[^/]*\z}{};
  while (my $line = <STDIN>) {
    my @req = split(' ', $line);
    if (@req != 4 || $req[0] ne 'allow-setuid' || $req[1] !~ /\A\d+:\d+\z/ || grep { !/\A\d+\z/ } @req[2 .. 3]) { print "bad request\n"; next; }
    my $pid = fork();
    if (!defined $pid) { print "fork: $!\n"; next; }
    if ($pid == 0) {
      @ARGV = @req[1 .. 3];
      do "$dir/allow-setuid.pl";
      print STDERR "userns.pl: allow-setuid.pl: $@$!\n";
      exit 126;
    }
    waitpid($pid, 0);
    print $? == 0 ? "ok\n" : "allow-setuid: exit " . ($? >> 8) . "\n";
  }
  kill 'KILL', $child;
  waitpid($child, 0);
  exit 0;
}

# close(2) on a raw descriptor without loading POSIX.
sub POSIX_close { open(my $fh, '<&=', $_[0]) and close($fh); }

main() unless caller;
1;
