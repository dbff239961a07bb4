// The kube sidecar's last step out of root (transparent.pl has set its groups and gid): setuid in
// this running process. The kernel marks a process non-dumpable when its credentials change
// (commit_creds), while an exec after the change makes it dumpable again (and a container's
// no_new_privs folds any real/effective split at exec). Non-dumpable, no other process of the pod
// can ptrace the proxy, read /proc/<pid>/mem or environ, or take its sockets with pidfd_getfd,
// even one that made itself uid 1337 (the agent-runtime can setuid; the pod shares its process
// namespace). The uid change also empties every capability (no SECBIT_KEEP_CAPS).
import { readFileSync } from "node:fs";

export function dropRoot(flag: string): void {
  const uid = Number(flag);
  const fail = (why: string) => {
    console.error(`traffic-proxy: --uid ${flag}: ${why}`);
    process.exit(2);
  };
  if (!/^[1-9]\d{0,9}$/.test(flag)) return fail("not a uid");
  if (process.getgid!() === 0 || process.getegid!() === 0) return fail("the group is still root (transparent.pl sets it)");
  process.setuid!(uid);
  const status = readFileSync("/proc/self/status", "utf8");
  const caps = ["CapPrm", "CapEff"].map((k) => new RegExp(`^${k}:\\s*([0-9a-f]+)$`, "m").exec(status)?.[1]);
  if (process.getuid!() !== uid || process.geteuid!() !== uid || caps.some((c) => c === undefined || /[1-9a-f]/.test(c))) fail("root not given up");
}
