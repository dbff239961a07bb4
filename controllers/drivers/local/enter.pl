#!/usr/bin/perl
# Runs one command inside a local sandbox: joins the sandbox's cgroups, enters the namespaces and
# root of its holder process, switches user, and execs. Usage (built by local-view.ts):
#   enter.pl <env file> <holder-pid>:<its start time>|0 <uid> <gid> <cwd> <cgroup.procs files, ':'-joined|->
#            <setns nr> <prctl nr> <capabilities kept in a user namespace, ','-joined|->
#            <seccomp program file|-> -- cmd args...
#
# This process is root in the host's namespaces until the child below drops its privileges, so
# nothing a tenant sent may reach it as something perl or the loader interprets. Its own
# environment is fixed by the driver (PATH and the driver's own variables; host-helpers.ts). The
# command's environment comes in <env file>: NUL-separated NAME=value entries in a 0600 file of
# a private directory (launcher.ts), read and unlinked first thing, and set only in the child,
# after its last privilege drop, just before exec. Arguments are positional; the command and
# its arguments are only ever passed to exec.
#
# Entering a pid namespace only applies to children, so this script forks: the parent stays on
# the host side as the process the runtime spawned (its pid, exit status and signals), forwards
# catchable signals to the child, and the child gets SIGKILL when the parent dies (pdeathsig),
# which covers the one signal that cannot be forwarded.
# No modules at all, not even strict/warnings: loading POSIX costs ~10 ms and warnings ~3.5 ms,
# more than everything this script does. Syscall numbers come from the driver, per architecture.

sub fail { print STDERR "enter.pl: $_[0]\n"; exit 127; }

# The command's environment from the handover file's contents; dies on an entry without a name.
sub parse_env {
  my ($data) = @_;
  my %env;
  for my $entry (split /\0/, $data) {
    $entry =~ /\A([^=]+)=(.*)\z/s or return (undef, 'bad entry in the environment file');
    $env{$1} = $2;
  }
  return (\%env, undef);
}

# Every descriptor above stderr is inherited, never this script's (perl marks what it opens above
# $^F close-on-exec, and the spawner hands it stdio only): a terminal's master that node-pty left
# open without close-on-exec in the spawner for another sandbox's terminal, or anything the spawner
# itself inherited. The command holds its own stdio only, so they are closed before anything else;
# one that cannot be closed fails the command rather than reach it.
sub close_inherited {
  opendir(my $dir, '/proc/self/fd') or fail("/proc/self/fd: $!");
  my $own = fileno($dir);
  my @fds = grep { /\A\d+\z/ && $_ > 2 && $_ != $own } readdir($dir);
  closedir($dir);
  for my $n (@fds) {
    open(my $h, '<&=', $n) or fail("inherited descriptor $n: $!");
    close($h);
  }
}

sub main {
  close_inherited();
  my ($envfile, $target, $uid, $gid, $cwd, $cgroups, $setns_nr, $prctl_nr, $keepcaps, $seccomp, $sep, @cmd) = @ARGV;
  fail('bad arguments') unless defined $sep && $sep eq '--' && @cmd && $prctl_nr =~ /\A\d+\z/ && $setns_nr =~ /\A\d+\z/
    && $keepcaps =~ /\A(-|\d+(,\d+)*)\z/ && $uid =~ /\A\d+\z/ && $gid =~ /\A\d+\z/
    && $target =~ /\A(?:0|[1-9][0-9]{0,9}:[0-9]{1,20})\z/;
  # The holder as the driver recorded it: its pid and kernel start time (/proc/<pid>/stat's field
  # 22), which no later process with the same pid has.
  my ($nspid, $nsstart) = $target eq '0' ? () : split(/:/, $target);
  my %keep = map { $_ => 1 } ($keepcaps eq '-' ? () : split(/,/, $keepcaps));

  # The sandbox's seccomp filter (seccomp.ts), the same program its holder got from bwrap: this
  # process enters by setns, so it is no child of a filtered process and must load it itself.
  # The driver's own file (never a tenant's bytes), read on the host side before any setns.
  my $filter;
  if ($seccomp ne '-') {
    open(my $sf, '<', $seccomp) or fail("seccomp program: $!");
    binmode($sf);
    $filter = do { local $/; <$sf> } // '';
    close($sf);
    fail('bad seccomp program') unless length($filter) && length($filter) % 8 == 0 && length($filter) <= 4096 * 8;
  }

  open(my $ef, '<', $envfile) or fail("environment file: $!");
  my $data = do { local $/; <$ef> };
  close($ef);
  unlink($envfile) or fail("unlink environment file: $!");
  my ($env, $why) = parse_env($data // '');
  fail($why) if $why;

  # Where to report the pid the command has in the sandbox (KRUISE_PID_FILE, set by the agent,
  # never by a tenant: spawner-sandbox-pid.ts; '-' for none). Opened here, before any setns, while
  # the path still names the host's file. The child writes its own pid (as its new pid namespace numbers it) on a
  # close-on-exec pipe first thing; this side reads it until the end of file, which comes when the
  # command has replaced the child (exec), or the child died, and only then writes it to the file,
  # before it reaps the child: so a command that is done at once still has its pid reported, and a
  # start is never reported before the command runs. The command holds neither the file nor the pipe.
  my $pidfile = delete $ENV{KRUISE_PID_FILE};
  my ($pidfh, $execr, $execw);
  if (defined $pidfile && $pidfile ne '-') {
    open($pidfh, '>', $pidfile) or fail("pid file: $!");
    pipe($execr, $execw) or fail("pipe: $!");
    # perl marks what it opens above $^F close-on-exec already; the pipe's end must not rely on it.
    fcntl($execw, 2, 1) or fail("close-on-exec: $!");  # F_SETFD, FD_CLOEXEC
  }

  # Die with whoever started us (the agent, or its spawner, which names itself in
  # KRUISE_PARENT_PID so that a death before this line counts too): nobody else would read our
  # output or reap our status, and the child below dies with us in turn.
  my $starter = delete $ENV{KRUISE_PARENT_PID} || getppid();
  syscall($prctl_nr, 1, 9, 0, 0, 0);  # PR_SET_PDEATHSIG SIGKILL
  exit 137 if getppid() != $starter;

  # Join cgroups first so that nothing started below can run outside the sandbox's limits.
  if ($cgroups ne '-') {
    for my $f (split /:/, $cgroups) {
      open(my $fh, '>', $f) or fail("open $f: $!");
      print $fh "$$\n";
      close($fh) or fail("join $f: $!");
    }
  }

  my $rootfh;
  # The holder's namespaces belong to a user namespace of the sandbox's own (userns.ts): join it
  # first, which gives this process every capability there (and none more on the host), so that
  # it may join the namespaces that user namespace owns.
  my $userns = 0;
  if ($nspid) {
    # Everything of the holder's is reached through one handle on its /proc directory, never by
    # its pid again. The pid names whatever process has it now: once the holder is gone (root in
    # the sandbox may kill its own pid 1) and a host process gets the same pid, `/proc/<pid>/ns`
    # and `root` are the host's, and the command would run as root in the host's namespaces. An
    # open /proc/<pid> directory stays bound to the process it was opened for: after that process
    # is gone every lookup under it fails, whoever has the pid by then. So: open it, check through
    # it that it is the recorded process (its start time), and open root and ns/* under it.
    opendir(my $pd, "/proc/$nspid") or fail("the sandbox is not running (holder $nspid: $!)");
    my $proc = '/proc/self/fd/' . fileno($pd);
    open(my $sf, '<', "$proc/stat") or fail("the sandbox is not running (holder $nspid: $!)");
    # The whole file: the command name may hold a newline, and a first line alone would then end
    # inside it (a live pid 1 refused as another process).
    my $stat = do { local $/; <$sf> } // '';
    close($sf);
    # The command name (field 2) is the process's own choice and may hold ") ": the fields start
    # after its last ')'.
    my @f = split / /, substr($stat, rindex($stat, ')') + 2);
    fail("the sandbox is not running (pid $nspid is another process now)") unless defined $f[19] && $f[19] eq $nsstart;
    opendir($rootfh, "$proc/root") or fail("the sandbox is not running (holder $nspid root: $!)");
    # Which namespace types this kernel has is asked of our own /proc/self/ns: the holder's are
    # only read, and one that cannot be (the holder ended meanwhile) fails the command instead of
    # leaving it in the host's namespace of that type.
    my @fds;
    my $theirs = readlink("$proc/ns/user") // fail("the sandbox is not running (holder $nspid: $!)");
    if ($theirs ne (readlink('/proc/self/ns/user') // '')) {
      open(my $fh, '<', "$proc/ns/user") or fail("open user namespace: $!");
      push @fds, ['user', $fh];
      $userns = 1;
    }
    # mnt last: after it, /proc is no longer the host's view.
    for my $ns (qw(cgroup ipc uts net pid mnt)) {
      my $ours = readlink("/proc/self/ns/$ns");
      next unless defined $ours;
      my $path = "$proc/ns/$ns";
      my $link = readlink($path) // fail("the sandbox is not running (holder $nspid: $!)");
      # One the holder shares with the host (the host's network): already ours, and once in the
      # sandbox's user namespace we would have no right to join it again.
      next if $userns && $link eq $ours;
      open(my $fh, '<', $path) or fail("open $ns namespace of holder $nspid: $!");
      push @fds, [$ns, $fh];
    }
    for my $e (@fds) {
      syscall($setns_nr, fileno($e->[1]), 0) == 0 or fail("setns $e->[0]: $!");
    }
  }

  my $parent = $$;
  my $child = fork();
  fail("fork: $!") unless defined $child;

  if ($child == 0) {
    if ($pidfh) { close($pidfh); close($execr); syswrite($execw, "$$\n"); }
    if ($rootfh) {
      chdir($rootfh) or fail("fchdir root: $!");
      chroot('.') or fail("chroot: $!");
    }
    chdir($cwd) or fail("chdir $cwd: $!");
    if (defined $filter) {
      # Before the privilege drop: loading a filter without NO_NEW_PRIVS (which sudo inside must
      # not have) takes CAP_SYS_ADMIN in the current user namespace, held until setuid below.
      # PR_SET_SECCOMP, SECCOMP_MODE_FILTER, struct sock_fprog { u16 len; (pad) ptr filter }.
      my $fprog = pack('S x6 P', length($filter) / 8, $filter);
      syscall($prctl_nr, 22, 2, $fprog, 0, 0) == 0 or fail("seccomp: $!");
    }
    if ($userns) {
      # Root inside a user namespace holds capabilities over that namespace's own objects only,
      # so it keeps a container's set ($keepcaps; userns.ts SANDBOX_CAPS), and setuid programs
      # (sudo) work: no NO_NEW_PRIVS. uid and gid are the sandbox's; the kernel maps them.
      for my $cap (0 .. 63) { next if $keep{$cap}; last if syscall($prctl_nr, 24, $cap, 0, 0, 0) != 0; }
      $) = "$gid $gid";
      $( = $gid;
      fail("setgid $gid: $!") if $( != $gid;
      ($<, $>) = ($uid, $uid);
      fail("setuid $uid: $!") if $< != $uid || $> != $uid;
    } elsif ($< == 0) {
      # Sandbox root is uid 0 without capabilities (PR_CAPBSET_DROP for each one), and no process
      # can gain any back through a setuid binary of the shared base (PR_SET_NO_NEW_PRIVS).
      for my $cap (0 .. 63) { last if syscall($prctl_nr, 24, $cap, 0, 0, 0) != 0; }
      syscall($prctl_nr, 38, 1, 0, 0, 0) == 0 or fail("no_new_privs: $!");
      $) = "$gid $gid";
      $( = $gid;
      fail("setgid $gid: $!") if $( != $gid;
      ($<, $>) = ($uid, $uid);
      fail("setuid $uid: $!") if $< != $uid || $> != $uid;
    }
    syscall($prctl_nr, 1, 9, 0, 0, 0);  # PR_SET_PDEATHSIG SIGKILL, after setuid (which clears it)
    exit 137 if getppid() != $parent && !$nspid;
    %ENV = %$env;
    exec { $cmd[0] } @cmd;
    fail("exec $cmd[0]: $!");
  }

  if ($userns) {
    # This side stays out of the sandbox's pid namespace and root, but joined its user namespace:
    # it becomes the sandbox's root too (its range's first uid on the host, never host root), which
    # can still signal and reap the child. Changing ids clears the parent-death signal.
    $) = "0 0";
    $( = 0;
    ($<, $>) = (0, 0);
    fail("setuid 0 in the user namespace: $!") if $< != 0 || $> != 0;
    syscall($prctl_nr, 1, 9, 0, 0, 0);  # PR_SET_PDEATHSIG SIGKILL
    if (getppid() != $starter) { kill 'KILL', $child; exit 137; }
  }
  my $tty = -t STDIN;
  for my $sig (qw(TERM HUP USR1 USR2 ALRM CONT), $tty ? () : qw(INT QUIT)) {
    $SIG{$sig} = sub { kill $sig, $child; };
  }
  $SIG{$_} = 'IGNORE' for ($tty ? qw(INT QUIT) : ());
  if ($pidfh) {
    close($execw);
    my ($report, $n) = ('');
    do { $n = sysread($execr, $report, 16 - length($report), length($report)); } while ($n || (!defined $n && $! == 4));  # EINTR
    close($execr);
    syswrite($pidfh, $report) if $report =~ /\A[1-9][0-9]{0,6}\n\z/;
    close($pidfh);
  }
  my $r;
  do { $r = waitpid($child, 0); } while ($r == -1 && $! == 4);  # EINTR
  my $st = $?;
  if ($st & 127) {
    my $sig = $st & 127;
    $SIG{$_} = 'DEFAULT' for keys %SIG;
    kill $sig, $$;
    exit 128 + $sig;
  }
  exit($st >> 8);
}

main() unless caller;
1;
