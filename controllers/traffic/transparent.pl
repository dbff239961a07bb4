#!/usr/bin/perl
# The traffic-proxy sidecar's start (controllers/drivers/kubernetes/traffic-pod.ts): opens the
# TPROXY listener, which needs IP_TRANSPARENT and so CAP_NET_ADMIN, exempts this container from
# the pod's redirect, gives up its groups and runs the proxy with the socket as fd 3:
#   transparent.pl <ip> <port> <uid> -- node controllers/traffic/main.ts --uid <uid> --transparent-fd 3 ...
# The exemption: the init container's nft tables have an empty `proxy` chain (nothing exempt);
# this fills it with "this container's cgroup and uid <uid>: accept". The cgroup is read from
# /proc/self/cgroup as the container's cgroup namespace shows it ("/" in a pod); nft resolves the
# path under /sys/fs/cgroup to the cgroup's id, and the kernel counts the level from the loader's
# cgroup namespace root (seen on 6.18; a kernel that counts from the real root matches nothing,
# so the proxy cannot get out: closed, not open). No other container's process can enter this
# cgroup (cgroup namespaces keep migration inside their own subtree), whatever uid it takes.
# The uid is set by the command itself (Node's process.setuid, `--uid`): a credential change in a
# running process makes it non-dumpable, an exec after the change would not.
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

open(my $cg, '<', '/proc/self/cgroup') or die "transparent.pl: /proc/self/cgroup: $!\n";
my ($path) = map { /^0::(\S*)$/ ? ($1) : () } <$cg>;
close($cg);
die "transparent.pl: no cgroup v2 path in /proc/self/cgroup\n" unless defined $path;
die "transparent.pl: unexpected cgroup path\n" unless $path =~ m{^/[A-Za-z0-9_.:@/-]*$} && $path !~ m{(^|/)\.\.?(/|$)};
$path =~ s{^/+|/+$}{}g;
my $level = $path eq '' ? 0 : scalar(split m{/+}, $path);
my $rule = "socket cgroupv2 level $level \"$path\" meta skuid $uid accept";
open(my $nft, '|-', 'nft', '-f', '-') or die "transparent.pl: nft: $!\n";
print $nft join('', map { "flush chain $_ sandbox_traffic proxy\nadd rule $_ sandbox_traffic proxy $rule\n" } qw(ip ip6));
close($nft) or die "transparent.pl: nft could not exempt this container (cgroup \"/$path\")\n";

$) = "$uid $uid";  # the supplementary groups: only <uid>
POSIX::setgid($uid) or die "transparent.pl: setgid $uid: $!\n";
die "transparent.pl: still group root\n" if $( == 0 || $) =~ /^0\b/;
exec { $cmd[0] } @cmd or die "transparent.pl: exec $cmd[0]: $!\n";
