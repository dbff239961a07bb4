# mmdebstrap customize hook for the `base` rootfs: $1 is the new root. Runs on the host as root,
# with SOURCE_DATE_EPOCH set (shadow's tools then write that day, not today's, into /etc/shadow).
root=$1
chroot "$root" groupadd --gid 1000 user
chroot "$root" useradd --uid 1000 --gid 1000 --create-home --home-dir /home/user --shell /bin/bash user
chroot "$root" usermod --shell /bin/bash root
printf 'user ALL=(ALL:ALL) NOPASSWD: ALL\n' >"$root/etc/sudoers.d/user"
chmod 0440 "$root/etc/sudoers.d/user"
# A sandbox gets its own hostname, hosts and resolv.conf at start; the builder's must not leak in
# (mmdebstrap copies the host's in to fetch packages and leaves them).
printf 'sandbox\n' >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tsandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
: >"$root/etc/resolv.conf"
chmod 0644 "$root/etc/hostname" "$root/etc/hosts" "$root/etc/resolv.conf"
