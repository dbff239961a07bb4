#!/usr/bin/perl
# The way in to user ports of sandboxes that have no network (see port-relay.ts). One process per
# driver, listening on a Unix socket in a private 0700 directory (a path socket, unlike TCP, is
# reachable from any network namespace). Per connection it forks; the child reads one request
# line "<ns pid> <ns pid start time> <port>\n", enters that process's network namespace (and no
# other), connects to 127.0.0.1:<port> there, answers "ok\n" or a one-line error, and then copies
# bytes both ways. Loopback of the sandbox is all it can reach: the address is fixed, and a
# namespace that is the relay's own (the host's network) is refused.
#
# The way out for sandboxes with egress rules: on
# "listen <tag> <ns pid> <start> <port> <max connections> [fast] [at <address>] [<cgroup.procs path>...]\n" from its
# stdin (only the agent writes there) the relay itself enters the sandbox's network namespace,
# opens a listener on 127.0.0.1:<port> there, and returns to its own namespace: the socket stays
# in the sandbox's. Each connection accepted on it is piped by a forked child to the proxy's Unix
# socket after the line "<tag>\n", so the proxy learns the sandbox from the listener the bytes
# arrived on, never from the bytes. The sandbox pays for those children: each joins the sandbox's
# cgroups (the given cgroup.procs files) before it reads a byte, so its pids and memory limits
# count them, and a connection beyond <max connections> open ones, or arriving when the
# sandbox's pids.max is reached, is closed at once. "close <tag>\n" closes the listener and kills
# the tag's children. One answer line per command, in order: "ok" or the reason. The egress port
# is not a user port: an inbound request for it is refused. With the listener, the namespace gets a
# redirect of all its TCP (and UDP/TCP port 53) to that port (`redirect_all`), and a UDP socket on
# it whose DNS queries go to the proxy over one "*dns" connection, framed with the tag.
# "fast <tag> <ip> <port> <seconds>" and "unfast <tag> <0|1>" program that redirect's set of
# destinations that skip the proxy (the kernel's fast path, `redirect_all`; only for a listener
# asked for with `fast`), and the same set of the host's guard on its veth (`guard`), keyed to
# <address>, the veth's leased address (never one read inside the namespace: its root may have
# changed eth0's).
#
# Sandbox networks (sandbox-net.ts), over netlink and without a process: on
# "veth <ns pid> <start> <name> <mac> <mtu> <bridge ifindex> <address>/<prefix> <gateway>\n" the
# relay creates the veth pair (host end <name>, up, an isolated port of the bridge; `eth0` with
# <mac> in the namespace of <ns pid>), enters that namespace to give eth0 its address, bring it up
# and route through <gateway>, and returns. A <name> already there is bound to that live process,
# so it is the sandbox's own, left by an agent that stopped before recording it: it is replaced, as
# is an `eth0` already in the namespace. Before the pair, the host gets the veth's tables
# (`veth_tables`; `guard` too when the namespace is behind the proxy with the fast path).
# "unveth <name>\n" deletes a host end (and its pair, and those tables). "tables <name> <mac>
# <address>\n" puts the bridge table of a host end already there in place again (an agent that
# adopts a sandbox whose veth an older agent made without it); replacing it is one transaction.
# A connection to the egress listener itself (HTTP_PROXY, not one the redirect brought) may be
# handed back by the proxy once it has decided it at L3/L4 (`handoff`): the child then connects to
# the destination itself and relays in the kernel (`splice_pump`), the proxy out of the bytes' way.
# Usage: port-relay.pl <socket path> <setns syscall nr> <prctl syscall nr> <splice syscall nr> <ct mark mask> [<proxy socket path>]
# (the mask: the conntrack mark bits the fast path's generations live in, see `gen_next`)
# (syscall numbers per architecture from host-helpers.ts; its environment is fixed there too).
# Loaded with `require` (the unit tests of its parsers), it defines its subs and runs nothing.
use Socket;
use Fcntl;
use Errno qw(EEXIST);

my ($path, $setns_nr, $prctl_nr, $splice_nr, $proxy);
my ($srv, $own_net, $own_ns, $relay);
my %egress;     # tag => listener in the sandbox's network namespace
my %egress_at;  # tag => "<net namespace> <port>" of that listener
my %egress_ns;  # tag => that network namespace (an open handle), to undo the redirect in
my %udp;        # tag => UDP socket on the listener's address there: its DNS, redirected
my %gen;        # tag => the conntrack mark bits its fast-path connections carry (see redirect_all)
# Generations live in the bits of the conntrack mark that $CT_MASK names, and nowhere else: the
# host's conntrack is shared with whatever else runs there (a firewall, kube-proxy, a mesh, a VPN
# that saves its packet marks), so every rule compares and sets only those bits (`ct mark and M ==
# V`, `ct mark set ct mark and ~M or V`), as kube-proxy and Calico do with theirs. A few bits
# wrap: a generation can come back while connections `unfast ... 1` ended (or a closed listener's)
# still sit in conntrack, idle, for days. So a generation is cleared from conntrack when it is
# taken (`ct_flush`, in the sandbox's namespace and on the host): a rule of that generation admits
# only what it marked itself. A connection of another sandbox's guard that happened to carry the
# same bits is judged again by its own rules (its next packet is new to conntrack) and keeps going
# while they admit it. One sequence for the relay, seeded from the clock, so relays sharing the
# host (agents, test suites) seldom take the same bits at once.
our $CT_MASK = 0xfff00000;
my ($ct_shift, $ct_max, $gen_seq);
sub ct_mask_set {
  my ($mask) = @_;
  $CT_MASK = $mask;
  ($ct_shift, $ct_max) = (0, $mask);
  ($ct_shift, $ct_max) = ($ct_shift + 1, $ct_max >> 1) until $ct_max & 1;
  $gen_seq = (time() * 64) % $ct_max;
}
ct_mask_set($CT_MASK);
# The next generation: mark bits within $CT_MASK, never 0 (an unmarked connection).
sub gen_next {
  $gen_seq = $gen_seq % $ct_max + 1;
  return $gen_seq << $ct_shift;
}
# A contiguous run of at least 4 bits (15 generations), as "0x" and 8 hex digits, or undef.
sub parse_mask {
  my ($m) = @_;
  return undef unless defined $m && $m =~ /^0x([0-9a-f]{8})$/;
  my $v = hex($1);
  return undef unless $v;
  my $run = $v;
  $run >>= 1 until $run & 1;
  return undef unless ($run & ($run + 1)) == 0 && $run >= 15;
  return $v;
}
sub hex32 { sprintf('0x%08x', $_[0]) }
my %dirty;      # tag => something was added to its fast-path set since it was last emptied
my %fastpath;   # tag => its listener was asked for with the fast path (`listen ... fast`)
my %guard;      # tag => [host end of its veth, its address]: the host's side of its fast path
my %bucket;     # key => [tokens, when last filled]: how many runs `fast` may still start
my $dns;        # the one connection to the proxy that carries DNS over UDP ("*dns")
my $dns_in = '';  # bytes read from it, not yet a whole frame
my %limit;      # tag => [max connections, cgroup.procs files]
my %kid;        # pid of an egress child => its tag
my %open;       # tag => how many egress children run
my $nlseq = 0;  # netlink sequence numbers

sub main {
  my $mask;
  ($path, $setns_nr, $prctl_nr, $splice_nr, $mask, $proxy) = @ARGV;
  die "port-relay.pl: bad arguments\n" unless defined $splice_nr && "$setns_nr $prctl_nr $splice_nr" =~ /^\d+ \d+ \d+$/;
  ct_mask_set(parse_mask($mask) // die "port-relay.pl: bad conntrack mark mask\n");
  my $starter = getppid();
  syscall($prctl_nr, 1, 9, 0, 0, 0);  # PR_SET_PDEATHSIG SIGKILL: the relay lives as long as its driver
  exit 137 if getppid() != $starter;

  socket($srv, PF_UNIX, SOCK_STREAM, 0) or die "port-relay.pl: socket: $!\n";
  unlink $path;
  bind($srv, pack_sockaddr_un($path)) or die "port-relay.pl: bind $path: $!\n";
  listen($srv, 128) or die "port-relay.pl: listen: $!\n";
  fcntl($srv, F_SETFL, fcntl($srv, F_GETFL, 0) | O_NONBLOCK);
  $own_net = readlink('/proc/self/ns/net');
  open($own_ns, '<', '/proc/self/ns/net') or die "port-relay.pl: own network namespace: $!\n";
  $SIG{CHLD} = sub {};  # interrupts select, so children are reaped (and counted) at once
  $SIG{PIPE} = 'IGNORE';  # an agent gone mid-answer is seen as the end of stdin
  $| = 1;
  print "ready\n";

  $relay = $$;
  my $ctl = '';
  for (;;) {
    while ((my $pid = waitpid(-1, 1)) > 0) {  # WNOHANG
      my $tag = delete $kid{$pid};
      $open{$tag}-- if defined $tag;
    }
    my $rin = '';
    vec($rin, fileno($srv), 1) = 1;
    vec($rin, fileno(STDIN), 1) = 1;
    vec($rin, fileno($_), 1) = 1 for values %egress, values %udp;
    vec($rin, fileno($dns), 1) = 1 if $dns;
    next if select(my $rout = $rin, undef, undef, undef) < 0;  # EINTR
    for my $tag (keys %udp) {
      dns_query($tag) if $udp{$tag} && vec($rout, fileno($udp{$tag}), 1);
    }
    dns_answers() if $dns && vec($rout, fileno($dns), 1);
    if (vec($rout, fileno($srv), 1) && accept(my $c, $srv)) {
      child($c, sub { serve($c) });
    }
    if (vec($rout, fileno(STDIN), 1)) {
      my $n = sysread(STDIN, $ctl, 4096, length $ctl);
      exit 0 unless $n;  # the agent is gone
      my @lines;
      while ((my $nl = index($ctl, "\n")) >= 0) {
        push @lines, substr($ctl, 0, $nl);
        $ctl = substr($ctl, $nl + 1);
      }
      # Consecutive `fast` lines of one sandbox go to nft as one run (one process, not one each:
      # this loop also relays every connection), each answered with its outcome, in order.
      while (@lines) {
        my ($first) = parse_command($lines[0]);
        my @run;
        while ($first && $first->[0] eq 'fast' && @lines) {
          my ($c) = parse_command($lines[0]);
          last unless $c && $c->[0] eq 'fast' && $c->[1] eq $first->[1];
          push @run, [@$c[2 .. 4]];
          shift @lines;
        }
        if (@run) {
          my $answer = fast($first->[1], @run);
          print "$answer\n" for @run;
          next;
        }
        print command(shift @lines), "\n";
      }
    }
    for my $tag (keys %egress) {
      my $l = $egress{$tag};
      next unless $l && vec($rout, fileno($l), 1);
      next unless accept(my $c, $l);  # nonblocking: a connection reset meanwhile is skipped
      my ($max, $procs) = @{$limit{$tag}};
      if (($open{$tag} // 0) >= $max || !pids_left($procs)) { close $c; next; }
      my $pid = child($c, sub { egress($c, $tag, sub { join_cgroups($procs) }) });
      if ($pid) { $kid{$pid} = $tag; $open{$tag}++; }
    }
  }
}

# Forks a child that serves one connection and exits; it holds no other socket of the relay.
# Returns its pid (0 when fork failed).
sub child {
  my ($c, $fn) = @_;
  my $pid = fork();
  if (!defined $pid) { close $c; return 0; }
  if ($pid == 0) {
    close $srv;
    close $_ for values %egress, values %udp;
    close $dns if $dns;
    close STDIN;
    close STDOUT;
    syscall($prctl_nr, 1, 9, 0, 0, 0);  # dies with the relay (cleared by fork)
    exit 0 if getppid() != $relay;
    $fn->();
    exit 0;
  }
  close $c;
  return $pid;
}

# Whether the sandbox's pids cgroup (among its cgroup directories) has fewer than pids.max
# processes plus `$more` (always true without one).
sub pids_below {
  my ($procs, $more) = @_;
  for my $file (@$procs) {
    (my $dir = $file) =~ s{/cgroup\.procs$}{};
    open(my $m, '<', "$dir/pids.max") or next;
    my $max = <$m>;
    chomp $max;
    next if $max eq 'max';
    open(my $cur, '<', "$dir/pids.current") or return 0;
    my $n = <$cur>;
    return 0 if $n >= $max + $more;
  }
  return 1;
}
sub pids_left { pids_below($_[0], 0) }

# Moves the calling child into the sandbox's cgroups, or ends it (and so the connection). Joining
# is never refused by pids.max, so a child that finds itself over it leaves.
sub join_cgroups {
  my ($procs) = @_;
  for my $file (@$procs) {
    open(my $f, '>', $file) or exit 0;
    syswrite($f, "$$\n") or exit 0;
    close $f or exit 0;
  }
  exit 0 unless pids_below($procs, 1);
}

# Closes the tag's listener, undoes its redirect, gate and guard, and ends its connections.
sub close_egress {
  my ($tag) = @_;
  close(delete $egress{$tag}) if $egress{$tag};
  close(delete $udp{$tag}) if $udp{$tag};
  my $ns = delete $egress_ns{$tag};
  # Its namespace may get a veth next (internet access): nothing may send its TCP to a listener
  # that is gone.
  in_ns($ns, \&unredirect) if $ns;
  unguard($tag);
  delete $gen{$tag};
  delete $bucket{"t $tag"};
  delete $egress_at{$tag};
  delete $limit{$tag};
  delete $fastpath{$tag};
  delete $dirty{$tag};
  my @pids = grep { $kid{$_} eq $tag } keys %kid;
  kill 'KILL', @pids if @pids;
}

# One line from the agent, checked: [verb, arguments...] or (undef, the reason). Nothing here
# acts; `command` does.
sub parse_command {
  my ($cmd) = @_;
  return ['close', $1] if $cmd =~ /^close ([A-Za-z0-9_-]{1,64})$/;
  return ['veth', $1, $2, $3, $4, $5, $6, $7, $8, $9] if $cmd =~ m{^veth (\d+) (\d+) (kr\d{1,12}) ((?:[0-9a-f]{2}:){5}[0-9a-f]{2}) (\d+) (\d+) (\d+\.\d+\.\d+\.\d+)/(\d+) (\d+\.\d+\.\d+\.\d+)$};
  return ['unveth', $1] if $cmd =~ /^unveth (kr\d{1,12})$/;
  if ($cmd =~ m{^tables (kr\d{1,12}) ((?:[0-9a-f]{2}:){5}[0-9a-f]{2}) (\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$}) {
    my ($name, $mac, @o) = ($1, $2, $3, $4, $5, $6);
    return (undef, 'bad address') if grep { $_ > 255 } @o;
    return ['tables', $name, $mac, join('.', @o)];
  }
  if ($cmd =~ /^fast ([A-Za-z0-9_-]{1,64}) (\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3}) (\d{1,5}) (\d{1,5})$/) {
    my ($tag, @o) = ($1, $2, $3, $4, $5);
    my ($port, $ttl) = ($6, $7);
    return (undef, 'bad address') if grep { $_ > 255 } @o;
    return (undef, "bad port $port") if $port < 1 || $port > 65535;
    return (undef, "bad timeout $ttl") if $ttl < 1 || $ttl > $FAST_CAP;
    return ['fast', $tag, join('.', @o), $port, $ttl];
  }
  return ['unfast', $1, $2] if $cmd =~ /^unfast ([A-Za-z0-9_-]{1,64}) ([01])$/;
  my ($tag, $nspid, $start, $port, $max, $fast, $addr, $procs) = $cmd =~ m{^listen ([A-Za-z0-9_-]{1,64}) (\d+) (\d+) (\d+) (\d+)( fast)?(?: at (\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}))?((?: /\S+/cgroup\.procs)*)$} or return (undef, 'bad command');
  return (undef, "bad port $port") if $port < 1 || $port > 65535;
  return (undef, 'bad address') if defined $addr && grep { $_ > 255 } split /\./, $addr;
  return ['listen', $tag, $nspid, $start, $port, $max, $fast ? 1 : 0, [grep { length } split / /, $procs], $addr // ()];
}

sub command {
  my ($c, $why) = parse_command($_[0]);
  return $why if $why;
  my ($verb, @a) = @$c;
  if ($verb eq 'close') {
    close_egress($a[0]);
    return 'ok';
  }
  return veth(@a) if $verb eq 'veth';
  return unveth(@a) if $verb eq 'unveth';
  return tables(@a) if $verb eq 'tables';
  return fast($a[0], [@a[1 .. 3]]) if $verb eq 'fast';
  return unfast(@a) if $verb eq 'unfast';
  my ($tag, $nspid, $start, $port, $max, $fast, $procs, $addr) = @a;
  return 'no proxy socket' unless defined $proxy;
  my ($ns, $err, $net) = namespace_of($nspid, $start);
  # A re-listen in the same namespace, on the same port and with the same mode (new limits) keeps
  # its sockets, and its redirect, gate, generation and the host's guard until redirect_all and
  # guard replace them, each in one nft transaction: so there is no moment when the port is free
  # for the sandbox to take, nor one when a sandbox with eth0 sends unfiltered, and its fast-path
  # connections of the generation it keeps are not reset. Whatever fails, what it had stays.
  my $same = !$err && ($egress_at{$tag} // '') eq "$net $port" && ($fastpath{$tag} // 0) == $fast;
  close_egress($tag) unless $same;
  return $err if $err;
  my ($l, $u) = $same ? ($egress{$tag}, $udp{$tag}) : ();
  my $gen = $same ? $gen{$tag} : $fast ? gen_next() : undef;
  # The guard's address: the leased one the agent sent (or the guard has), never one read in the
  # sandbox's namespace, whose root may have changed eth0's.
  $addr //= $guard{$tag}[1] if $same && $guard{$tag};
  my $eth0;
  my $why = in_ns($ns, sub {
    $eth0 = ifindex('eth0');
    unless ($same) {
      socket($l, PF_INET, SOCK_STREAM, 0) && setsockopt($l, SOL_SOCKET, SO_REUSEADDR, 1)
        && bind($l, sockaddr_in($port, INADDR_LOOPBACK)) && listen($l, 128)
        or return "listen on 127.0.0.1:$port: $!";
      socket($u, PF_INET, SOCK_DGRAM, 0) && bind($u, sockaddr_in($port, INADDR_LOOPBACK)) or return "UDP on 127.0.0.1:$port: $!";
    }
    # A generation just taken holds nothing from an earlier life of its bits.
    if (!$same && defined $gen) {
      my $err = ct_flush($gen);
      return "conntrack: $err" if $err;
    }
    return redirect_all($port, $gen);
  });
  # An eth0 there already (a sandbox with internet access that got rules, or a re-listen): its
  # guard on the host's side now; otherwise `veth` makes it before the veth.
  $why //= !$fast || !$eth0 ? undef : !defined $addr ? 'eth0 without its leased address' : do {
    local $gen{$tag} = $gen;
    guard($tag, "kr$nspid", $addr, !$same);
  };
  if ($why) {
    # Fail closed. A re-listen keeps all it had (a redirect to a closed port refuses; a gate and
    # guard of the old generation admit only the old set). Anything else leaves no listener, no
    # redirect and no eth0: a governed namespace never has eth0 without both walls (the agent
    # gives it back once a listen succeeds: LocalDriver #syncNet).
    return $why if $same;
    # An eth0 that cannot be deleted keeps whatever redirect it had.
    in_ns($ns, sub { unredirect() if !$eth0 || unveth('eth0') eq 'ok' });
    close $l if $l;
    close $u if $u;
    return $why;
  }
  if (!$same) {
    fcntl($l, F_SETFL, fcntl($l, F_GETFL, 0) | O_NONBLOCK);
    fcntl($u, F_SETFL, fcntl($u, F_GETFL, 0) | O_NONBLOCK);
    ($egress{$tag}, $udp{$tag}, $egress_ns{$tag}, $egress_at{$tag}, $fastpath{$tag}) = ($l, $u, $ns, "$net $port", $fast);
  } else {
    # New limits: the connections opened under the old ones end (the agent's own tally starts over).
    my @pids = grep { $kid{$_} eq $tag } keys %kid;
    kill 'KILL', @pids if @pids;
  }
  ($gen{$tag}, $dirty{$tag}) = ($gen, 0);
  $limit{$tag} = [$max, $procs];
  return 'ok';
}

# The network namespace of a running process (checked after opening, so a reused pid is not
# taken for it) and its identity, or why not; never the relay's own (the host's network).
sub namespace_of {
  my ($nspid, $start) = @_;
  open(my $ns, '<', "/proc/$nspid/ns/net") or return (undef, 'the sandbox is not running');
  open(my $st, '<', "/proc/$nspid/stat") or return (undef, 'the sandbox is not running');
  # The whole file (a name may hold a newline); the fields after the name's last ')'.
  my $stat = do { local $/; <$st> } // '';
  my @f = split / /, substr($stat, rindex($stat, ')') + 2);
  return (undef, 'the sandbox is not running') unless defined $f[19] && $f[19] eq $start;
  my $target_net = readlink('/proc/self/fd/' . fileno($ns));
  return (undef, 'refused: that process shares the host network') if !defined $target_net || $target_net eq $own_net;
  return ($ns, undef, $target_net);
}

# `join`: moves the child into the sandbox's cgroups (or ends it), called once the proxy has the
# tag line and before a byte of the sandbox's is read: a first migration into a cgroup v2 waits
# for an RCU grace period (6-16 ms here), and the proxy decides a redirected connection by its
# tag line alone meanwhile.
sub egress {
  my ($c, $tag, $join) = @_;
  socket(my $p, PF_UNIX, SOCK_STREAM, 0) or exit 0;
  connect($p, pack_sockaddr_un($proxy)) or exit 0;  # no proxy: the client sees the connection close
  my $line = tag_line($tag, getsockopt($c, 0, 80), getsockname($c));  # SOL_IP, SO_ORIGINAL_DST
  my ($ip, $port) = $line =~ /^\S+ (\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}) (\d{1,5})\n\z/;
  # To the listener itself (HTTP_PROXY): "<tag> *", so the proxy may hand it back. Redirected (but
  # DNS, which the proxy answers itself): "<tag> <ip> <port> *", to be handed back, if at all,
  # only to where the kernel says it was going.
  my $offer = $line eq "$tag\n" ? "$tag *\n" : defined $port && $port != 53 ? "$tag $ip $port *\n" : $line;
  put($p, $offer) or exit 0;
  $join->();
  return handoff($c, $p) if $line eq "$tag\n";
  return handoff($c, $p, "$ip $port") if $offer ne $line;
  pump($c, $p, '', 1);
}

# A connection the proxy may hand back. Until the proxy's first byte, the client's bytes go to the
# proxy (its request), and a copy of them is kept (at most $HANDOFF_KEEP bytes: beyond, the client
# waits). That byte is 'R': everything goes through the proxy from then on (pump); or 'S' and the
# line "<ip> <port> <read> <ok> <fail> <up>\n" and that many bytes of each of the last three: the
# proxy allowed the connection at L3/L4, had read <read> of the client's bytes, and hands it over.
# The child then stops sending it anything, connects to <ip> (from the host's network, as the
# proxy would; one IPv4 address, the one the proxy judges again on a rule change), sends <ok> to
# the client (or <fail>, and ends, when it does not answer), <up> to the destination (the request
# as the proxy rewrote it, and what it had read past it), then the client's bytes the proxy had not
# read yet, and from then on relays client and destination in the kernel. <read> '-' (one plain
# request, answered with the connection's end): nothing of the client's goes after <up>, since
# the proxy never checked it (a pipelined request may name another host); only the answer flows. The proxy's socket stays open while the connection lives:
# the proxy ending it ends the connection (a rule change that denies it), and the child's end tells
# the proxy it is over. `$only` ("<ip> <port>", a redirected connection's original destination,
# from the kernel): the one destination it may be handed back to; any other S line ends it. A
# redirected connection's <ok> and <fail> are empty (the proxy never speaks to such a client).
our $HANDOFF_KEEP = 1 << 20;
sub handoff {
  my ($c, $p, $only) = @_;
  my ($mode, $sent, $c_open) = (undef, '', 1);
  while (!defined $mode) {
    my $rin = '';
    vec($rin, fileno($c), 1) = 1 if $c_open && length $sent < $HANDOFF_KEEP;
    vec($rin, fileno($p), 1) = 1;
    next if select(my $rout = $rin, undef, undef, undef) < 0;  # EINTR
    if ($c_open && vec($rout, fileno($c), 1)) {
      my $n = sysread($c, my $buf, 65536);
      exit 0 unless defined $n;
      if ($n) { put($p, $buf) or exit 0; $sent .= $buf } else { shutdown($p, 1); $c_open = 0 }
    }
    if (vec($rout, fileno($p), 1)) {
      sysread($p, $mode, 1) or exit 0;  # the proxy closed before a word (no request in time)
    }
  }
  # Redirected: a proxy that ends without a byte after 'R' (it could not connect) ends it all.
  return pump($c, $p, '', defined $only) if $mode eq 'R';
  exit 0 unless $mode eq 'S';
  my $head = '';
  while (index($head, "\n") < 0) {
    exit 0 if length $head > 256;
    sysread($p, $head, 1, length $head) or exit 0;
  }
  my ($ip, $port, $read, @len) = $head =~ /^(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}) (\d{1,5}) (\d{1,7}|-) (\d{1,7}) (\d{1,7}) (\d{1,7})\n\z/ or exit 0;
  exit 0 if defined $only && "$ip $port" ne $only;
  my $one = $read eq '-';
  exit 0 if !$one && $read > length $sent;
  my @part;
  for my $len (@len) {
    my $b = '';
    while (length $b < $len) { sysread($p, $b, $len - length $b, length $b) or exit 0 }
    push @part, $b;
  }
  my $u = dial([$ip], $port, 10);
  unless ($u) { put($c, $part[1]); exit 0 }
  put($c, $part[0]) && put($u, $part[2] . ($one ? '' : substr($sent, $read))) or exit 0;
  undef $sent;
  shutdown($u, 1) unless $c_open;
  splice_pump($c, $u, $p, $one);
}

# A TCP connection to the first of `ips` that answers on `port` within `secs` each, or undef.
sub dial {
  my ($ips, $port, $secs) = @_;
  for my $ip (@$ips) {
    socket(my $u, PF_INET, SOCK_STREAM, 0) or return undef;
    fcntl($u, F_SETFL, fcntl($u, F_GETFL, 0) | O_NONBLOCK);
    connect($u, sockaddr_in($port, inet_aton($ip)));
    my $win = '';
    vec($win, fileno($u), 1) = 1;
    next unless select(undef, my $wout = $win, undef, $secs) > 0;
    next if unpack('i', getsockopt($u, SOL_SOCKET, SO_ERROR) // pack('i', 1));
    fcntl($u, F_SETFL, fcntl($u, F_GETFL, 0) & ~O_NONBLOCK);
    return $u;
  }
  return undef;
}

# Relays two sockets both ways through a pipe each with splice(2): the bytes stay in the kernel
# (pages moved, not copied through this process). Ends as `pump` does: an end of input becomes a
# half-close of the other side, a side that cannot take more stops only that direction, a reset
# ends both; and at once when anything (or the end) arrives on `watch`. `back_only`: only `b`'s
# bytes go to `a`; `a`'s stay unread (and it ends when `b` does).
sub splice_pump {
  my ($a, $b, $watch, $back_only) = @_;
  my @d;
  for ([$a, $b], [$b, $a]) {
    pipe(my $r, my $w) or exit 0;
    fcntl($w, 1031, 1 << 20);  # F_SETPIPE_SZ, best effort (pipe-max-size)
    fcntl($_, F_SETFL, fcntl($_, F_GETFL, 0) | O_NONBLOCK) for $r, $w;
    push @d, { from => $_->[0], to => $_->[1], r => $r, w => $w, n => 0 };
  }
  $d[0]{done} = 1 if $back_only;
  fcntl($_, F_SETFL, fcntl($_, F_GETFL, 0) | O_NONBLOCK) for $a, $b;
  while (my @live = grep { !$_->{done} } @d) {
    my ($rin, $win) = ('', '');
    for (@live) {
      if ($_->{n}) { vec($win, fileno($_->{to}), 1) = 1 } else { vec($rin, fileno($_->{from}), 1) = 1 }
    }
    vec($rin, fileno($watch), 1) = 1;
    next if select(my $rout = $rin, my $wout = $win, undef, undef) < 0;  # EINTR
    exit 0 if vec($rout, fileno($watch), 1);  # the proxy ended it
    for my $x (@live) {
      if (!$x->{n} && vec($rout, fileno($x->{from}), 1)) {
        my $k = syscall($splice_nr, fileno($x->{from}), 0, fileno($x->{w}), 0, 1 << 20, 3);  # SPLICE_F_MOVE | SPLICE_F_NONBLOCK
        if ($k == 0) {
          shutdown($x->{to}, 1);
          $x->{done} = 1;
          next;
        }
        next if $k < 0 && $!{EAGAIN};
        exit 0 if $k < 0;  # reset: closing both ends passes it on
        $x->{n} = $k;
      }
      # Freshly read, or the far side took more: as much as it takes now. Never SPLICE_F_MORE: on
      # a TCP socket it is MSG_MORE, which holds a short write (a request through a tunnel, the end
      # of an answer on a kept-alive connection) for up to 200 ms waiting for more that may never
      # come; the kernel's autocorking already merges what follows at once.
      while ($x->{n}) {
        my $k = syscall($splice_nr, fileno($x->{r}), 0, fileno($x->{to}), 0, $x->{n}, 3);  # SPLICE_F_MOVE | SPLICE_F_NONBLOCK
        last if $k < 0 && $!{EAGAIN};
        if ($k <= 0) { $x->{done} = 1; last }
        $x->{n} -= $k;
      }
    }
  }
}

# The line the proxy reads before the sandbox's bytes: "<tag>" for a connection to the listener
# itself (HTTP_PROXY), "<tag> <ip> <port>" for one the redirect brought (its original destination,
# from conntrack; the kernel's, never the sandbox's word).
sub tag_line {
  my ($tag, $orig, $local) = @_;
  return "$tag\n" unless defined $orig && length($orig) >= 8 && defined $local;
  my ($port, $addr) = (unpack('n', substr($orig, 2, 2)), substr($orig, 4, 4));
  my ($lport, $laddr) = sockaddr_in($local);
  return "$tag\n" if $addr eq $laddr && $port == $lport;
  return "$tag " . inet_ntoa($addr) . " $port\n";
}

# Inside a sandbox's network namespace (the caller has entered it): every TCP connection but to
# its own loopback goes to the egress listener on <port>, which learns where it was going from
# SO_ORIGINAL_DST. A default route through lo (at the lowest priority, so a veth's route added
# later wins) lets connect() get as far as the redirect. The sandbox's processes have no
# CAP_NET_ADMIN over this namespace (it belongs to the host's user namespace, or to the sandbox's,
# where that capability is not in root's bounding set: README.md), so they cannot undo either.
# Undef, or why not.
#
# The kernel's fast path (../../traffic/README.md, "The kernel's fast path"): destinations the
# proxy already allowed (address . tcp . port, in the set `fast`, each with a timeout, added by
# `fast`) are not redirected; they leave by the sandbox's eth0, when it has one. The `gate` chain
# lets out, besides loopback's packets (where the redirect leads), only a new TCP connection to a
# member of `fast` (marking it with the generation <gen>) and the packets of connections so
# marked: UDP, ICMP, anything else and a connection of an older generation (a policy change ended
# them, `unfast`) are refused there.
my $NFT_RESET = "table ip kruise_egress {}\ndelete table ip kruise_egress\n";
our $FAST_CAP = 3600;     # the longest timeout an element gets, in seconds
our $FAST_SIZE = 4096;    # elements per sandbox at most: beyond, the proxy keeps deciding
our $HOST_GRACE = 5;     # seconds a host-side element outlives the sandbox's (`fast`)
# The MSS a sandbox's TCP advertises. A connect() takes it from the route to the destination:
# eth0's (the fast path) when there is one, MTU 1400 or 1500, although the redirect then takes the
# connection over loopback to the relay's child, which then may send no larger segments than that.
# Segments that small on loopback cost the kernel about a third more CPU per byte than
# loopback-sized ones (s14: 200 MiB over a redirect in a bare namespace, 95 against 72 ms of CPU;
# what kept net.redirected_download_ratio below the CONNECT one, whose client connects to
# 127.0.0.1). So a governed namespace advertises loopback's MSS on every route (min_adv_mss, IPv4,
# the namespace's own knob), and its `mss` chain lowers it again to the route's on every SYN that
# leaves by another interface than lo: on the wire (eth0, the fast path) a SYN says what eth0
# carries, as before. Lowering is all nft does to an MSS, and the sandbox cannot remove the chain
# (no CAP_NET_ADMIN there). `adv_mss`: undef, or why not.
my $MSS_CHAIN = " chain mss {\n  type filter hook postrouting priority 0; policy accept;\n"
  . "  oifname != \"lo\" tcp flags syn tcp option maxseg size set rt mtu\n }\n";
our $ADV_MSS_BIG = 65495;   # IPV4_MAX_PMTU less the IPv4 and TCP headers: the kernel's ceiling
our $ADV_MSS_DEFAULT = 256;  # the kernel's own value (net.ipv4.route.min_adv_mss)
sub adv_mss {
  # /proc/sys/net is the writer's namespace, here the sandbox's.
  open(my $f, '>', '/proc/sys/net/ipv4/route/min_adv_mss') or return "min_adv_mss: $!";
  print($f "$_[0]\n") && close($f) or return "min_adv_mss: $!";
  return undef;
}
sub gate_rules {
  my ($gen) = @_;
  # After the redirect a packet goes to 127.0.0.1 (the listener), though its output interface, read
  # before the redirect rerouted it, may still say eth0.
  return "  oifname \"lo\" accept\n  ip daddr 127.0.0.0/8 accept\n"
    . "  ct state established,related " . ct_is($gen) . " accept\n"
    . "  ct state new meta l4proto tcp ip daddr . meta l4proto . th dport \@fast " . ct_set($gen) . " accept\n"
    . "  meta l4proto tcp reject with tcp reset\n  drop\n";
}
sub redirect_all {
  my ($port, $gen) = @_;
  my $lo = ifindex('lo') or return 'no lo';
  # RTM_NEWROUTE (CREATE|REPLACE): default, main table, boot protocol, link scope, unicast; RTA_OIF, RTA_PREFSRC, RTA_PRIORITY
  my $err = rtnl(24, 0x500, lo_route($lo));
  return "route through lo: $err" if $err;
  # getaddrinfo's AI_ADDRCONFIG (getent, many clients) asks for A records only when the host has
  # an IPv4 address other than 127.0.0.1: lo gets 127.0.0.2 too, so names resolve.
  $err = rtnl(20, 0x500, lo_addr($lo));  # RTM_NEWADDR (CREATE|REPLACE)
  return "address on lo: $err" if $err;
  # DNS first, wherever it is sent (a resolv.conf naming 127.0.0.53 too): the proxy answers it.
  # Without a generation (the fast path off) there is no set and no gate: nothing to bypass.
  my $fast = defined $gen;
  # The clamp first, then the larger MSS (`adv_mss`): no SYN leaves by eth0 saying more than eth0
  # carries. A kernel without the namespace's own knob (before 6.3) keeps eth0's: slower, not wrong.
  return nft($NFT_RESET . "table ip kruise_egress {\n"
    . ($fast ? " set fast {\n  type ipv4_addr . inet_proto . inet_service; flags timeout; size $FAST_SIZE;\n }\n" : '')
    . " chain out {\n  type nat hook output priority -100; policy accept;\n"
    . "  meta l4proto { tcp, udp } th dport 53 redirect to :$port\n"
    . "  ip daddr { 127.0.0.0/8, 0.0.0.0/8 } return\n"
    . ($fast ? "  ip daddr . meta l4proto . th dport \@fast return\n" : '')
    . "  meta l4proto tcp redirect to :$port\n }\n"
    . ($fast ? " chain gate {\n  type filter hook output priority 0; policy accept;\n" . gate_rules($gen) . " }\n" : '')
    . $MSS_CHAIN . "}\n") // do { adv_mss($ADV_MSS_BIG); undef };
}

# The host's side of a governed sandbox's fast path, which nothing in the sandbox can reach (its
# root could, with a capability it must not have, undo the redirect and the gate: README.md). Two
# tables in the relay's (the host's) network namespace, named after the veth's host end:
# - `bridge kruise_veth_<name>` (every veth, made before the pair): what enters the bridge by
#   that port carries the veth's own MAC and, in IPv4 and ARP, its own address; anything else
#   (another sandbox's address, IPv6, other protocols) is dropped. So an address below is that
#   sandbox's, and no sandbox can take over another's replies by ARP.
# - `inet kruise_veth_<name>` (governed sandboxes with an eth0): from the sandbox's address only
#   a new TCP connection to a member of its own set `fast` (the same elements as its netns's set,
#   added by the same `fast`) and the packets of connections so admitted under the current
#   generation are forwarded; everything else is dropped. Another table's accept does not
#   override a drop here.
sub veth_tables {
  my ($name, $mac, $addr) = @_;
  return "table bridge kruise_veth_$name {}\ndelete table bridge kruise_veth_$name\ntable bridge kruise_veth_$name {\n"
    . " chain in {\n  type filter hook prerouting priority -300; policy accept;\n"
    . "  iifname != \"$name\" accept\n  ether saddr != $mac drop\n"
    . "  ether type arp arp saddr ether $mac arp saddr ip $addr accept\n"
    . "  ether type ip ip saddr $addr accept\n  drop\n }\n}\n";
}
sub guard_rules {
  my ($addr, $gen) = @_;
  return "  meta nfproto != ipv4 accept\n  ip saddr != $addr accept\n"
    . "  ct state established,related " . ct_is($gen) . " accept\n"
    . "  ct state new ip daddr . tcp dport \@fast " . ct_set($gen) . " accept\n  drop\n";
}
# The generation's match and mark, on $CT_MASK's bits only: other bits of the mark are others'.
sub ct_is { "ct mark and " . hex32($CT_MASK) . " == " . hex32($_[0]) }
sub ct_set { "ct mark set ct mark and " . hex32(~$CT_MASK & 0xffffffff) . " or " . hex32($_[0]) }
sub guard_table {
  my ($name, $addr, $gen) = @_;
  return "table inet kruise_veth_$name {}\ndelete table inet kruise_veth_$name\ntable inet kruise_veth_$name {\n"
    . " set fast {\n  type ipv4_addr . inet_service; flags timeout; size $FAST_SIZE;\n }\n"
    . " chain forward {\n  type filter hook forward priority -10; policy accept;\n" . guard_rules($addr, $gen) . " }\n}\n";
}
# Puts the tag's guard on the host (its set empty) for the veth `name` with `addr`, the tag's
# current generation (`fresh`: just taken, so first cleared from the host's conntrack): undef, or
# why not. Runs in the relay's own namespace.
sub guard {
  my ($tag, $name, $addr, $fresh) = @_;
  return 'no generation' unless defined $gen{$tag};
  my $err = $fresh ? ct_flush($gen{$tag}) : undef;
  return "conntrack on the host: $err" if $err;
  $err = nft(guard_table($name, $addr, $gen{$tag}));
  return "guard on the host: $err" if $err;
  $guard{$tag} = [$name, $addr];
  return undef;
}
sub unguard {
  my ($tag) = @_;
  my $g = delete $guard{$tag} or return;
  nft("table inet kruise_veth_$g->[0] {}\ndelete table inet kruise_veth_$g->[0]\n");
}
# Tables of veths whose sandbox's pid 1 is gone (a namespace that ended without `unveth`/`close`):
# deleted, so an address leased again is not held to an old guard.
sub sweep_tables {
  open(my $l, '-|', 'nft', 'list', 'tables') or return;
  my @gone = grep { !-e "/proc/$_->[1]" } map { /^table (bridge|inet) kruise_veth_kr(\d+)$/ ? [$1, $2] : () } <$l>;
  close $l;
  nft(join('', map { "delete table $_->[0] kruise_veth_kr$_->[1]\n" } @gone)) if @gone;
}

# Runs `fn` in the network namespace `ns` (an open handle) and comes back; its answer, or why not.
sub in_ns {
  my ($ns, $fn) = @_;
  syscall($setns_nr, fileno($ns), 0x40000000) == 0 or return "setns: $!";  # CLONE_NEWNET
  my $answer = $fn->();
  syscall($setns_nr, fileno($own_ns), 0x40000000) == 0 or die "port-relay.pl: cannot return to its own network namespace: $!\n";
  return $answer;
}

# Whether `fast` may run now (at `now`, in seconds) for `tag`, taking a token if so. Each run is
# two nf_tables transactions (`set_add`), taken in the relay's loop, which relays every connection
# of every sandbox, and under the kernel's one nf_tables lock per namespace: a sandbox making a new
# destination every few ms must not stall the others. A token bucket per
# sandbox and one for the relay; refused elements just stay the proxy's (correct, slower).
our @FAST_TAG_BUCKET = (16, 4);     # burst, runs per second, per sandbox
our @FAST_ALL_BUCKET = (64, 32);    # the same for all sandboxes together
sub fast_budget {
  my ($tag, $now) = @_;
  my @b = map {
    my ($key, $burst, $rate) = @$_;
    my $b = $bucket{$key} //= [$burst, $now];
    my $t = $b->[0] + ($now - $b->[1]) * $rate;
    [$b, $t > $burst ? $burst : $t, $now];
  } ["t $tag", @FAST_TAG_BUCKET], ['*', @FAST_ALL_BUCKET];
  $_->[0][1] = $_->[2] for @b;
  my $ok = !grep { $_->[1] < 1 } @b;
  $_->[0][0] = $_->[1] - ($ok ? 1 : 0) for @b;
  return $ok;
}

# Runs `fn` inside the network namespace of the tag's egress listener; its answer, or why not.
sub in_egress_ns {
  my ($tag, $fn) = @_;
  my $ns = $egress_ns{$tag} or return 'no egress listener';
  return in_ns($ns, $fn);
}

# "fast <tag> <ip> <port> <seconds>": later TCP connections of the sandbox to ip:port skip the
# proxy for that long (an element already there keeps its timeout). A full set refuses it.
# Several ([ip, port, seconds] each) go in one transaction per set; a full set refuses them all.
# The host's set first, and for longer, so the sandbox's kernel never sends one the host would drop. Without a
# guard (no eth0, or the fast path off) nothing is added: there is no way out but the proxy.
sub fast {
  my ($tag, @elements) = @_;
  return 'no egress listener' unless $egress_ns{$tag};
  return 'no fast path' unless $fastpath{$tag};
  my $g = $guard{$tag} or return 'no eth0';
  return 'rate limited' unless fast_budget($tag, time());
  $dirty{$tag} = 1;
  # The host's element outlives the sandbox's by a few seconds: the other way round, a connection
  # opened between the two expiries would skip the redirect and die in the host's drop.
  my $err = set_add(1, "kruise_veth_$g->[0]", map { [pack('a4 n x2', inet_aton($_->[0]), $_->[1]), $_->[2] + $HOST_GRACE] } @elements);
  return "host: $err" if $err;
  return in_egress_ns($tag, sub { set_add(2, 'kruise_egress', map { [pack('a4 C x3 n x2', inet_aton($_->[0]), 6, $_->[1]), $_->[2]] } @elements) // 'ok' });
}
# Adds elements ([key, seconds] each) to the set `fast` of the table `table` of `family`
# (NFPROTO_INET 1, NFPROTO_IPV4 2) in the current network namespace, all or none: the message
# `nft add element` sends, but from this process. `fast` runs just as the connection it admits
# starts to download, and nft was a fork and exec, about 1.7 ms of CPU (two per admission, s14),
# where this is a few syscalls. A key is the set's concatenation, each field in network order
# padded to 4 bytes (address . [tcp .] port).
# Undef, or why not.
my $ENFILE = do { local $! = 23; "$!" };  # what nf_tables answers for a full set
sub set_add {
  my ($family, $table, @elements) = @_;
  # NFTA_LIST_ELEM { NFTA_SET_ELEM_TIMEOUT (ms, big-endian), NFTA_SET_ELEM_KEY { NFTA_DATA_VALUE } }
  my $list = join('', map { nla(0x8001, nla(4, pack('Q>', $_->[1] * 1000)) . nla(0x8001, nla(1, $_->[0]))) } @elements);
  # NFT_MSG_NEWSETELEM with NLM_F_CREATE (add, not create): NFTA_SET_ELEM_LIST_TABLE, _SET, _ELEMENTS
  my $err = nft_batch(12, 0x400, pack('CCn', $family, 0, 0) . nla(1, "$table\0") . nla(2, "fast\0") . nla(0x8003, $list));
  return $err && $err eq $ENFILE ? 'set full' : $err;
}

# "unfast <tag> <0|1>": empties the sandbox's set, so every new connection goes to the proxy
# again; with 1 also ends the connections that went the kernel's way (a new generation: their
# next packet is answered with a reset).
# Each nft run holds up this loop (a few ms): an empty set is not flushed again.
sub unfast {
  my ($tag, $end) = @_;
  return 'ok' if $egress_ns{$tag} && (!$fastpath{$tag} || (!$end && !$dirty{$tag}));
  $dirty{$tag} = 0;
  my $gen = $end ? gen_next() : $gen{$tag};
  my $answer = in_egress_ns($tag, sub {
    my $flush = "flush set ip kruise_egress fast\n";
    return nft($flush) // 'ok' unless $end;
    my $err = ct_flush($gen);
    return "conntrack: $err" if $err;
    return nft($flush . "flush chain ip kruise_egress gate\ntable ip kruise_egress {\n chain gate {\n" . gate_rules($gen) . " }\n}\n") // 'ok';
  });
  $gen{$tag} = $gen if $answer eq 'ok';
  # The host's side the same way (after the sandbox's: new connections go to the proxy first).
  if (my $g = $guard{$tag}) {
    my $t = "inet kruise_veth_$g->[0]";
    my $err = $end ? ct_flush($gen) : undef;
    $err //= nft("flush set $t fast\n" . ($end ? "flush chain $t forward\ntable $t {\n chain forward {\n" . guard_rules($g->[1], $gen) . " }\n}\n" : ''));
    $answer = "host: $err" if $err && $answer eq 'ok';
  }
  return $answer;
}
sub lo_route { pack('CCCCCCCCL', 2, 0, 0, 0, 254, 3, 253, 1, 0) . nla(4, pack('L', $_[0])) . nla(7, inet_aton('127.0.0.1')) . nla(6, pack('L', 0xfffffff0)) }
# AF_INET, /32, host scope on lo; IFA_LOCAL, IFA_ADDRESS
sub lo_addr { my $ip = inet_aton('127.0.0.2'); pack('CCCCL', 2, 32, 0, 254, $_[0]) . nla(2, $ip) . nla(1, $ip) }
sub unredirect {
  my $lo = ifindex('lo');
  rtnl(25, 0, lo_route($lo)) if $lo;  # RTM_DELROUTE; gone already is fine
  rtnl(21, 0, lo_addr($lo)) if $lo;  # RTM_DELADDR
  # The kernel's MSS again before the clamp goes; if that cannot be, the clamp stays.
  nft($NFT_RESET . (adv_mss($ADV_MSS_DEFAULT) ? "table ip kruise_egress {\n$MSS_CHAIN}\n" : ''));
}
sub nft {
  open(my $n, '|-', 'nft', '-f', '-') or return "nft: $!";
  print $n $_[0];
  close $n;
  return $? ? "nft exited with status " . ($? >> 8) : undef;
}

# A DNS query the sandbox sent (to port 53 anywhere; the redirect brought it to its UDP socket):
# framed for the proxy with the tag and the sender's address as the token the answer comes back
# with. Without a proxy connection the query is dropped (the client asks again).
sub dns_query {
  my ($tag) = @_;
  my $from = recv($udp{$tag}, my $q, 4096, 0);
  return unless defined $from && length $q;
  unless ($dns) {
    socket($dns, PF_UNIX, SOCK_STREAM, 0) && connect($dns, pack_sockaddr_un($proxy)) && put($dns, "*dns\n") or return undef $dns;
    $dns_in = '';
  }
  my $frame = "$tag " . unpack('H*', $from) . "\n" . $q;
  undef $dns unless put($dns, pack('n', length $frame) . $frame);
}

# Answers from the proxy, each sent back from the socket the query came to (so conntrack gives
# it the address the query was sent to as its source).
sub dns_answers {
  my $n = sysread($dns, $dns_in, 65536, length $dns_in);
  unless ($n) { undef $dns; return; }
  while (length($dns_in) >= 2 && length($dns_in) >= 2 + unpack('n', $dns_in)) {
    my $frame = substr($dns_in, 2, unpack('n', $dns_in));
    $dns_in = substr($dns_in, 2 + length $frame);
    my ($tag, $to, $answer) = $frame =~ /^([A-Za-z0-9_-]{1,64}) ([0-9a-f]{1,64})\n(.*)\z/s or next;
    send($udp{$tag}, $answer, 0, pack('H*', $to)) if $udp{$tag};
  }
}

sub answer { syswrite($_[0], "$_[1]\n"); exit 0; }

# What the bytes read so far from an inbound connection ask for: undef while the request line
# "<ns pid> <start time> <port>\n" is incomplete, else {nspid, start, port, rest} (rest: the
# bytes after the line, for the user's port) or {error}.
sub parse_request {
  my ($buf) = @_;
  my $nl = index($buf, "\n");
  return { error => 'request line too long' } if ($nl < 0 ? length $buf : $nl) > 64;
  return undef if $nl < 0;
  my ($nspid, $start, $port) = substr($buf, 0, $nl) =~ /^(\d+) (\d+) (\d+)$/ or return { error => 'bad request line' };
  return { error => "bad port $port" } if $port < 1 || $port > 65535;
  return { nspid => $nspid, start => $start, port => $port, rest => substr($buf, $nl + 1) };
}

sub serve {
  my ($c) = @_;
  my ($buf, $req) = ('');
  until ($req = parse_request($buf)) {
    my $n = sysread($c, $buf, 64, length $buf);
    exit 0 unless $n;
  }
  answer($c, $req->{error}) if $req->{error};
  my $port = $req->{port};
  my ($ns, $err, $net) = namespace_of($req->{nspid}, $req->{start});
  answer($c, $err) if $err;
  # The proxy would serve an outsider under the sandbox's rules.
  answer($c, "port $port is the sandbox's egress proxy, not a user port") if grep { $_ eq "$net $port" } values %egress_at;
  syscall($setns_nr, fileno($ns), 0x40000000) == 0 or answer($c, "setns: $!");  # CLONE_NEWNET
  socket(my $u, PF_INET, SOCK_STREAM, 0) or answer($c, "socket: $!");
  connect($u, sockaddr_in($port, INADDR_LOOPBACK)) or answer($c, "connect to port $port: $!");
  syswrite($c, "ok\n");
  pump($c, $u, $req->{rest});
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
# its answer still flows back. With $silent_ends, a far side that ends without having sent a byte
# ends the whole connection: the proxy closes a client that sent no request in time that way,
# and a sandbox that keeps its end open must not keep this process.
sub pump {
  my ($c, $u, $rest, $silent_ends) = @_;
  my $heard = 0;
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
      $heard ||= $n && $from == $u;
      exit 0 if $n == 0 && $from == $u && $silent_ends && !$heard;
      if ($n == 0) {
        shutdown($dst, 1);
        delete $to{$fd};
        next;
      }
      delete $to{$fd} unless put($dst, $buf);
    }
  }
}

# One rtnetlink request on a fresh socket of the current network namespace (a netlink socket
# stays in the namespace it was made in); undef when the kernel acknowledged it, or the error.
sub nla {
  my ($type, $data) = @_;
  my $len = 4 + length $data;
  return pack('SS', $len, $type) . $data . ("\0" x ((4 - $len % 4) % 4));
}
sub rtnl { netlink(0, @_) }  # NETLINK_ROUTE
# One request of `protocol` (NETLINK_*) on a fresh socket of the current network namespace.
sub netlink {
  my ($protocol, $type, $flags, $body) = @_;
  return netlink_send($protocol, nlmsg($type, $flags, $body));
}
sub nlmsg { pack('LSSLL', 16 + length $_[2], $_[0], $_[1] | 5, ++$nlseq, 0) . $_[2] }  # NLM_F_REQUEST | NLM_F_ACK
# Sends `bytes` (messages of which only one asks for an answer) and reads that answer.
sub netlink_send {
  my ($protocol, $bytes) = @_;
  socket(my $nl, 16, SOCK_RAW, $protocol) or return "netlink socket: $!";  # PF_NETLINK
  send($nl, $bytes, 0) or return "netlink: $!";
  defined recv($nl, my $buf, 65536, 0) or return "netlink: $!";
  my (undef, $t) = unpack('LS', $buf);
  return "netlink: answer of type $t" unless $t == 2;  # NLMSG_ERROR
  my $errno = unpack('l', substr($buf, 16, 4));
  return undef unless $errno;
  local $! = -$errno;
  return "$!";
}
# One nf_tables message (NFT_MSG_*) in a batch of its own (NFNL_MSG_BATCH_BEGIN and _END for
# NFNL_SUBSYS_NFTABLES), the one transaction nf_tables takes changes in: undef, or why not.
sub nft_batch {
  my ($type, $flags, $body) = @_;
  my $edge = sub { pack('LSSLL', 20, $_[0], 1, ++$nlseq, 0) . pack('CCn', 0, 0, 10) };  # NLM_F_REQUEST
  return netlink_send(12, $edge->(0x10) . nlmsg((10 << 8) | $type, $flags, $body) . $edge->(0x11));  # NETLINK_NETFILTER
}
# Deletes the current network namespace's conntrack entries whose mark has `mark` in $CT_MASK's
# bits (ctnetlink's flush with CTA_MARK and CTA_MARK_MASK): undef, or why not.
sub ct_flush {
  my ($mark) = @_;
  # NETLINK_NETFILTER; NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_DELETE; nfgenmsg (AF_INET,
  # version 0, res_id 0); CTA_MARK, CTA_MARK_MASK (big-endian)
  return netlink(12, (1 << 8) | 2, 0, pack('CCn', 2, 0, 0) . nla(8, pack('N', $mark)) . nla(21, pack('N', $CT_MASK)));
}
sub ifinfo { pack('CxSiLL', @_) }  # family, type, index, flags, change
sub ifindex {
  socket(my $s, PF_INET, SOCK_DGRAM, 0) or return 0;
  my $req = pack('a16 i x20', $_[0], 0);
  ioctl($s, 0x8933, $req) or return 0;  # SIOCGIFINDEX
  return unpack('x16 i', $req);
}

sub unveth {
  my ($name) = @_;  # kr<pid>, or eth0 inside a sandbox's namespace
  my $err = rtnl(17, 0, ifinfo(0, 0, 0, 0, 0) . nla(3, "$name\0"));  # RTM_DELLINK by IFLA_IFNAME
  return "delete $name: $err" if $err && ifindex($name);
  # A host end's tables go with it (never for eth0, which is inside a sandbox's namespace).
  if ($name =~ /^kr\d+$/) {
    delete $guard{$_} for grep { $guard{$_}[0] eq $name } keys %guard;
    nft(join('', map { "table $_ kruise_veth_$name {}\ndelete table $_ kruise_veth_$name\n" } 'bridge', 'inet'));
  }
  return 'ok';
}

sub veth {
  my ($nspid, $start, $name, $mac, $mtu, $bridge, $addr, $prefix, $gw) = @_;
  my ($ns, $err, $net) = namespace_of($nspid, $start);
  return $err if $err;
  # A sandbox behind the proxy gets eth0 for the kernel's fast path: its redirect stays.
  my ($governed) = grep { (split / /, $egress_at{$_})[0] eq $net } keys %egress_at;
  # The namespace by the fd checked above, not by pid: a pid reused meanwhile cannot misplace eth0.
  my $peer = ifinfo(0, 0, 0, 0, 0) . nla(3, "eth0\0") . nla(4, pack('L', $mtu))
    . nla(1, pack('C6', map { hex } split /:/, $mac)) . nla(28, pack('L', fileno($ns)));  # IFNAME MTU ADDRESS NET_NS_FD
  my $linkinfo = nla(1, "veth\0") . nla(2, nla(1, $peer));  # INFO_KIND, INFO_DATA { VETH_INFO_PEER }
  # RTM_NEWLINK, CREATE|EXCL: up (IFF_UP in flags and change), IFNAME, MTU, MASTER, LINKINFO.
  my $create = sub { rtnl(16, 0x600, ifinfo(0, 0, 0, 1, 1) . nla(3, "$name\0") . nla(4, pack('L', $mtu)) . nla(10, pack('L', $bridge)) . nla(18, $linkinfo)) };
  if (ifindex($name)) {
    $err = unveth($name);
    return "replace $name: $err" unless $err eq 'ok';
  }
  # The host's side before the pair exists, so eth0 is never up without it.
  sweep_tables();
  $err = nft(veth_tables($name, $mac, $addr));
  return "guard on the host: $err" if $err;
  my $guarded = defined $governed && $fastpath{$governed};
  if ($guarded) {
    $err = guard($governed, $name, $addr);
    return undo_veth($name, $err) if $err;
  }
  $err = $create->();
  if ($err && $err eq do { local $! = EEXIST; "$!" }) {  # an eth0 the namespace already has
    my $old = in_ns($ns, sub { unveth('eth0') });
    $err = $old eq 'ok' ? $create->() : "replace eth0: $old";
  }
  return undo_veth($name, "create $name: $err") if $err;
  my $host = ifindex($name);
  # RTM_SETLINK of the bridge port (AF_BRIDGE): IFLA_PROTINFO (nested) { IFLA_BRPORT_ISOLATED 1 }.
  $err = $host ? rtnl(19, 0, ifinfo(7, 0, $host, 0, 0) . nla(12 | 0x8000, nla(33, pack('C', 1)))) : 'gone';
  return undo_veth($name, "isolate $name: $err") if $err;
  $err = in_ns($ns, sub {
    unredirect() unless defined $governed;  # a sandbox that had rules and has none now: its TCP goes out by eth0
    # A new guard starts empty: so does the sandbox's set (an eth0 given back while the listener
    # stayed), or what is in it would leave by eth0 into the host's drop.
    nft("flush set ip kruise_egress fast\n") if $guarded;
    # No IPv6 on eth0 (before it is up, so not even a link-local address): the gate is an IPv4
    # chain. /proc/sys/net is the namespace of the writer, which is now the sandbox's; a host
    # without IPv6 has no such file, and then there is nothing to turn off.
    if (open(my $v6, '>', '/proc/sys/net/ipv6/conf/eth0/disable_ipv6')) {
      print($v6 "1\n") && close($v6) or return "disable IPv6 on eth0: $!";
    }
    my $eth0 = ifindex('eth0');
    my $ip = inet_aton($addr);
    my $why = !$eth0 ? 'no eth0'
      # RTM_NEWADDR (CREATE|EXCL): AF_INET, prefix, IFA_LOCAL, IFA_ADDRESS
      : rtnl(20, 0x600, pack('CCCCL', 2, $prefix, 0, 0, $eth0) . nla(2, $ip) . nla(1, $ip))
      # RTM_SETLINK: up
      // rtnl(19, 0, ifinfo(0, 0, $eth0, 1, 1))
      # RTM_NEWROUTE (CREATE|EXCL): AF_INET, default, main table, boot protocol, universe, unicast; RTA_GATEWAY, RTA_OIF
      // rtnl(24, 0x600, pack('CCCCCCCCL', 2, 0, 0, 0, 254, 3, 0, 1, 0) . nla(5, inet_aton($gw)) . nla(4, pack('L', $eth0)));
    return $why && "configure eth0: $why";
  });
  return $err ? undo_veth($name, $err) : 'ok';
}
sub undo_veth { unveth($_[0]); return $_[1]; }

# The bridge table of the host end `name` (see veth_tables) put in place again, whatever is there.
sub tables {
  my ($name, $mac, $addr) = @_;
  return "no veth $name" unless ifindex($name);
  my $err = nft(veth_tables($name, $mac, $addr));
  return $err ? "tables of $name: $err" : 'ok';
}

main() unless caller;
1;
