#!/usr/bin/perl
# The traffic-proxy sidecar's start (controllers/drivers/kubernetes/traffic-pod.ts): opens the
# TPROXY listener, which needs IP_TRANSPARENT and so CAP_NET_ADMIN, then gives up root for good and
# runs the proxy with the socket as fd 3:
#   transparent.pl <ip> <port> <uid> -- node controllers/traffic/main.ts --transparent-fd 3 ...
# setgid/setuid from root to <uid> clear every capability (no SECBIT_KEEP_CAPS), so the proxy runs
# as the uid the pod's nft rules let out, with none. Node has no setsockopt; this is all it lacks.
use strict;
use Socket qw(PF_INET SOCK_STREAM SOL_SOCKET SO_REUSEADDR IPPROTO_IP inet_aton sockaddr_in);
use Fcntl qw(F_SETFD);
use POSIX ();

my ($ip, $port, $uid, $sep, @cmd) = @ARGV;
die "transparent.pl: usage: <ip> <port> <uid> -- <command...>\n"
  unless defined $sep && $sep eq '--' && @cmd && $port =~ /^\d{1,5}$/ && $uid =~ /^[1-9]\d{0,9}$/ && defined inet_aton($ip);
my $IP_TRANSPARENT = 19;
socket(my $l, PF_INET, SOCK_STREAM, 0) or die "transparent.pl: socket: $!\n";
setsockopt($l, SOL_SOCKET, SO_REUSEADDR, 1) or die "transparent.pl: SO_REUSEADDR: $!\n";
setsockopt($l, IPPROTO_IP, $IP_TRANSPARENT, 1) or die "transparent.pl: IP_TRANSPARENT (needs NET_ADMIN): $!\n";
bind($l, sockaddr_in($port, inet_aton($ip))) or die "transparent.pl: bind $ip:$port: $!\n";
listen($l, 1024) or die "transparent.pl: listen: $!\n";
POSIX::dup2(fileno($l), 3) or die "transparent.pl: dup2: $!\n" if fileno($l) != 3;
open(my $fd3, '<&=', 3) or die "transparent.pl: fd 3: $!\n";
fcntl($fd3, F_SETFD, 0) or die "transparent.pl: fd 3 kept across exec: $!\n";
$) = "$uid $uid";  # the supplementary groups: only <uid>
POSIX::setgid($uid) or die "transparent.pl: setgid $uid: $!\n";
POSIX::setuid($uid) or die "transparent.pl: setuid $uid: $!\n";
die "transparent.pl: still root\n" if $< == 0 || $> == 0 || $( == 0;
exec { $cmd[0] } @cmd or die "transparent.pl: exec $cmd[0]: $!\n";
