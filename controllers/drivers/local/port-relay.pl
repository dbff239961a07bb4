#!/usr/bin/perl
# The way in to user ports of sandboxes that have no network (see port-relay.ts). One process per
# driver, listening on a Unix socket in a private 0700 directory (a path socket, unlike TCP, is
# reachable from any network namespace). Per connection it forks; the child reads one request
# line "<ns pid> <ns pid start time> <port>\n", enters that process's network namespace (and no
# other), connects to 127.0.0.1:<port> there, answers "ok\n" or a one-line error, and then copies
# bytes both ways. Loopback of the sandbox is all it can reach: the address is fixed, and a
# namespace that is the relay's own (the host's network) is refused.
# Usage: port-relay.pl <socket path> <setns syscall nr>
use Socket;

my ($path, $setns_nr) = @ARGV;
die "port-relay.pl: bad arguments\n" unless defined $setns_nr && $setns_nr =~ /^\d+$/;
my $starter = getppid();
syscall(157, 1, 9, 0, 0, 0);  # PR_SET_PDEATHSIG SIGKILL: the relay lives as long as its driver
exit 137 if getppid() != $starter;

socket(my $srv, PF_UNIX, SOCK_STREAM, 0) or die "port-relay.pl: socket: $!\n";
unlink $path;
bind($srv, pack_sockaddr_un($path)) or die "port-relay.pl: bind $path: $!\n";
listen($srv, 128) or die "port-relay.pl: listen: $!\n";
my $own_net = readlink('/proc/self/ns/net');
$SIG{CHLD} = 'IGNORE';  # children are reaped by the kernel
$| = 1;
print "ready\n";
close STDOUT;

my $relay = $$;
for (;;) {
  accept(my $c, $srv) or next;  # EINTR
  my $pid = fork();
  if (!defined $pid) { close $c; next; }
  if ($pid == 0) {
    close $srv;
    syscall(157, 1, 9, 0, 0, 0);  # dies with the relay (cleared by fork)
    exit 0 if getppid() != $relay;
    serve($c);
    exit 0;
  }
  close $c;
}

sub answer { syswrite($_[0], "$_[1]\n"); exit 0; }

sub serve {
  my ($c) = @_;
  my $line = '';
  while (index($line, "\n") < 0) {
    my $n = sysread($c, $line, 64, length $line);
    exit 0 unless $n;
    answer($c, 'request line too long') if length $line > 64;
  }
  my $nl = index($line, "\n");
  my ($head, $rest) = (substr($line, 0, $nl), substr($line, $nl + 1));
  my ($nspid, $start, $port) = $head =~ /^(\d+) (\d+) (\d+)$/ or answer($c, 'bad request line');
  answer($c, "bad port $port") if $port < 1 || $port > 65535;
  open(my $ns, '<', "/proc/$nspid/ns/net") or answer($c, 'the sandbox is not running');
  # Checked after opening: the namespace held is the one of the process meant, not of a reused pid.
  open(my $st, '<', "/proc/$nspid/stat") or answer($c, 'the sandbox is not running');
  my $stat = <$st>;
  my @f = split / /, substr($stat, rindex($stat, ')') + 2);
  answer($c, 'the sandbox is not running') unless defined $f[19] && $f[19] eq $start;
  my $target_net = readlink('/proc/self/fd/' . fileno($ns));
  answer($c, 'refused: that process shares the host network') if !defined $target_net || $target_net eq $own_net;
  syscall($setns_nr, fileno($ns), 0x40000000) == 0 or answer($c, "setns: $!");  # CLONE_NEWNET
  socket(my $u, PF_INET, SOCK_STREAM, 0) or answer($c, "socket: $!");
  connect($u, sockaddr_in($port, INADDR_LOOPBACK)) or answer($c, "connect to port $port: $!");
  syswrite($c, "ok\n");
  pump($c, $u, $rest);
}

sub put {
  my ($to, $buf) = @_;
  my $off = 0;
  while ($off < length $buf) {
    my $w = syswrite($to, $buf, length($buf) - $off, $off);
    return 0 unless defined $w;
    $off += $w;
  }
  return 1;
}

# Copies both ways until both sides ended; an end of input on one side becomes a half-close of
# the other, so request bodies and WebSocket closes pass through as they would over TCP. A side
# that cannot take more (a server that answered early and closed) stops only that direction:
# its answer still flows back.
sub pump {
  my ($c, $u, $rest) = @_;
  $SIG{PIPE} = 'IGNORE';
  my $up = !length $rest || put($u, $rest);
  my %to = (fileno($u) => [$u, $c]);
  $to{fileno($c)} = [$c, $u] if $up;
  while (%to) {
    my $rin = '';
    vec($rin, $_, 1) = 1 for keys %to;
    next if select(my $rout = $rin, undef, undef, undef) < 0;  # EINTR
    for my $fd (keys %to) {
      next unless vec($rout, $fd, 1);
      my ($from, $dst) = @{$to{$fd}};
      my $n = sysread($from, my $buf, 65536);
      exit 0 unless defined $n;  # reset: closing both ends passes it on
      if ($n == 0) {
        shutdown($dst, 1);
        delete $to{$fd};
        next;
      }
      delete $to{$fd} unless put($dst, $buf);
    }
  }
}
