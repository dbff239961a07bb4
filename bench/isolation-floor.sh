#!/bin/bash
# The isolation floor (issue 16, section 1): one sandbox made and destroyed as isolated as the
# local driver makes it, by a plain script with the same tools and nothing else, so the driver's
# CPU can be read against it in the same run (bench/e2e.ts `local.isolation_floor_cpu_ms_each`,
# bench/driver-profile.ts). Steps, in the driver's order:
#   cgroups (a directory per hierarchy given, limits, joined before exec), a disk of its own
#   (sparse image, mkfs.ext4, loop mount), a user namespace with a 65536-id range (the driver's
#   userns.pl), the template's layer ID-mapped through it, the root as an overlay of that on the
#   disk, bwrap (as the range's owner, setpriv) making pid/net/ipc/uts/mount namespaces with the root bound
#   at / and its own /proc, /dev, a veth pair on the bridge (isolated port, address, default
#   route), one command entered into all its namespaces as uid 1000 (the first command), then
#   cgroup.kill, the unmounts and the deletion.
# Not done per sandbox by either side: the bridge's nftables table (one per driver, sandbox-net.ts).
# Not in the floor: what the driver adds beyond isolation (allow-setuid.pl, for sudo; records;
# the address lease; the files API's identity files).
# Prints the CPU of this shell and of every process it ran (bash `times`: getrusage, ms) as its
# last two lines. Run as root.
#   isolation-floor.sh <work dir> <id> <layer dirs, bottom first, colon-separated> <uid base, 0: no user namespace> <bridge> <address/prefix> <gateway> <cgroup dir>...
set -euo pipefail
userns_pl=$(dirname "$0")/../controllers/drivers/local/userns.pl
work=$1 id=$2 layers=$3 base=$4 bridge=$5 cidr=$6 gw=$7
shift 7
d=$work/$id
cgs=()
for parent in "$@"; do cgs+=("$parent/$id"); done

# A wait that starts no process (bash has no built-in sleep): a read that times out.
exec 8<> <(:)
nap() { read -r -t 0.001 -u 8 || true; }
# FLOOR_STEPS=1: each step's CPU (this shell and its children, from `times`) on stderr.
step() { if [ -n "${FLOOR_STEPS:-}" ]; then echo "step $1" >&2; times >&2; fi; }

mkdir -p "$d/disk" "$d/root"
# A failed step leaves nothing mounted or running (the bench goes on with the next round).
cleanup() {
  for cg in "${cgs[@]}"; do if [ -e "$cg/cgroup.kill" ]; then echo 1 > "$cg/cgroup.kill"; fi; done
  umount -l "$d/root" 2>/dev/null || true; for m in "$d"/layers/*; do umount -l "$m" 2>/dev/null || true; done; umount -l "$d/disk" 2>/dev/null || true
  for cg in "${cgs[@]}"; do rmdir "$cg" 2>/dev/null || true; done
  # Never delete through a mount (the template's layer is one).
  grep -q " $d/" /proc/mounts || rm -rf "$d"
}
trap 'cleanup; exit 1' ERR
for cg in "${cgs[@]}"; do
  mkdir "$cg"
  if [ -e "$cg/memory.max" ]; then echo 536870912 > "$cg/memory.max"; fi
  if [ -e "$cg/memory.limit_in_bytes" ]; then echo 536870912 > "$cg/memory.limit_in_bytes"; fi
  if [ -e "$cg/cpu.max" ]; then echo "100000 100000" > "$cg/cpu.max"; fi
  if [ -e "$cg/cpu.cfs_quota_us" ]; then echo 100000 > "$cg/cpu.cfs_quota_us"; fi
  if [ -e "$cg/pids.max" ]; then echo 4096 > "$cg/pids.max"; fi
done
join_cgroups() { for cg in "${cgs[@]}"; do echo "$BASHPID" > "$cg/cgroup.procs"; done; }

step cgroups
truncate -s 1024M "$d/image"
mkfs.ext4 -q -F -m 0 -E nodiscard,lazy_itable_init=1,lazy_journal_init=1 "$d/image"
mount -t ext4 -o loop,nosuid,nodev,noinit_itable "$d/image" "$d/disk"
mkdir -p "$d/disk/upper" "$d/disk/work"
IFS=: read -r -a trees <<<"$layers"
pairs=() lower="" mapped=()
for i in "${!trees[@]}"; do
  if [ "$base" = 0 ]; then lower="${trees[$i]}${lower:+:$lower}"; continue; fi
  mkdir -p "$d/layers/$i"
  pairs+=("${trees[$i]}" "$d/layers/$i")
  mapped=("$d/layers/$i" "${mapped[@]}")
  lower="$d/layers/$i${lower:+:$lower}"
done
step disk
mkfifo "$d/info"
if [ "$base" != 0 ]; then
  chown "$base:$base" "$d/disk/upper"
  # The user namespace (the range mapped), the layers ID-mapped through it and the overlay on
  # them: the driver's own helper, which is these syscalls and nothing else (x86-64 numbers:
  # unshare, open_tree, mount_setattr, move_mount, mount).
  coproc USERNS { exec perl "$userns_pl" "$base" 65536 272 428 442 429 "${pairs[@]}" overlay 165 "$d" "lowerdir=$lower,upperdir=$d/disk/upper,workdir=$d/disk/work" "$d/root" 2>>"$work/floor.log"; }
  # bash forgets a coprocess's pid and fds once it ends: kept apart.
  userns_pid=$USERNS_PID userns_out=${USERNS[0]} userns_in=${USERNS[1]}
  read -r nspid <&"$userns_out"
  # The holder: bwrap as the namespace's owner, its namespaces made inside it.
  (
    join_cgroups
    exec setpriv --reuid="$base" --regid="$base" --clear-groups \
      bwrap --userns 5 --unshare-pid --unshare-ipc --unshare-uts --unshare-net --unshare-cgroup-try --hostname "$id" --cap-drop ALL --chdir / \
        --bind "$d/root" / --proc /proc --dev /dev --perms 1777 --tmpfs /dev/shm --perms 0755 --tmpfs /run \
        --info-fd 9 -- /usr/bin/sleep infinity 9>"$d/info" 5<"/proc/$nspid/ns/user" {userns_in}>&- {userns_out}<&-
  ) </dev/null >/dev/null 2>>"$work/floor.log" &
else
  # Without a user namespace (a driver whose data directory others may not pass): bwrap as root.
  mount -t overlay overlay -o "lowerdir=$lower,upperdir=$d/disk/upper,workdir=$d/disk/work" "$d/root"
  (
    join_cgroups
    exec bwrap --unshare-pid --unshare-ipc --unshare-uts --unshare-net --unshare-cgroup-try --hostname "$id" --cap-drop ALL --chdir / \
        --bind "$d/root" / --proc /proc --dev /dev --perms 1777 --tmpfs /dev/shm --perms 0755 --tmpfs /run \
        --info-fd 9 -- /usr/bin/sleep infinity 9>"$d/info"
  ) </dev/null >/dev/null 2>>"$work/floor.log" &
fi

holder=$!
read -r -d '}' info < "$d/info" || true
[[ $info =~ \"child-pid\":\ *([0-9]+) ]]
init=${BASH_REMATCH[1]}
# bwrap's pid 1 runs `sleep` once its mounts are done.
up=""
until [ -n "$up" ]; do
  kids=""
  [ -e "/proc/$init" ] || { echo "the holder exited: $(tail -3 "$work/floor.log")" >&2; false; }
  read -r kids < "/proc/$init/task/$init/children" || true
  for k in $kids; do comm=""; read -r comm < "/proc/$k/comm" || true; if [ "$comm" = sleep ]; then up=1; fi; done
  [ -n "$up" ] || nap
done

# Its network: one veth pair, the host end an isolated port of the bridge.
step userns+overlay+holder
veth=kf$init
ip -b - <<EOF
link add $veth type veth peer name eth0 netns $init
link set $veth master $bridge
link set dev $veth type bridge_slave isolated on
link set $veth up
EOF
nsenter -t "$init" -n ip -b - <<EOF
link set lo up
addr add $cidr dev eth0
link set eth0 up
route add default via $gw
EOF

# The namespace's helper goes once the holder has joined it.
if [ "$base" != 0 ]; then
  exec {userns_in}>&- {userns_out}<&-
  wait "$userns_pid" || true
fi

step veth
# The first command: cgroups joined, all namespaces entered, uid 1000.
userns_flag=(-U)
[ "$base" != 0 ] || userns_flag=()
(join_cgroups; exec nsenter -t "$init" "${userns_flag[@]}" -m -p -n -i -u -r -w -S 1000 -G 1000 /bin/true)

step first-command
# Destroy.
for cg in "${cgs[@]}"; do if [ -e "$cg/cgroup.kill" ]; then echo 1 > "$cg/cgroup.kill"; fi; done
kill -9 "$holder" 2>/dev/null || true
{ wait "$holder"; } 2>/dev/null || true
for cg in "${cgs[@]}"; do until rmdir "$cg" 2>/dev/null; do nap; done; done
umount "$d/root" "${mapped[@]}" "$d/disk"
grep -q " $d/" /proc/mounts || rm -rf "$d"
step destroy
trap - ERR
# `times` in this shell (a $(...) would be a subshell's): user and system time of this shell, then
# of its children; printed as is, the caller sums them (no process started after this point).
times
