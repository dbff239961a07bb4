// Finds out, once at start, how well this host can isolate sandboxes, by trying each primitive
// for real rather than guessing from the OS name.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import type { DriverCapabilities, IsolationLevel } from "../driver.ts";
import { detectCgroups, type CgroupLayout } from "./cgroups.ts";
import { probeDisk } from "./disk.ts";

export interface ProbeResult {
  capabilities: DriverCapabilities;
  cgroups?: CgroupLayout;
}

const LEVELS: IsolationLevel[] = ["bwrap+cgroup", "bwrap", "process"];

function probeBwrap(): string | undefined {
  if (process.getuid?.() !== 0) {
    // Without root there is no way to join the sandbox's namespaces as another user without a
    // user namespace, which this driver does not set up.
    return "the agent is not root";
  }
  if (!existsSync("/usr/bin/perl")) return "/usr/bin/perl (perl-base) is missing: needed to enter sandboxes";
  const r = spawnSync("bwrap", ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev", "--", "/usr/bin/true"], { encoding: "utf8", timeout: 10_000 });
  if (r.error) return `bwrap not usable: ${r.error.message} (install the bubblewrap package)`;
  if (r.status !== 0) return `bwrap failed: ${r.stderr.trim() || `exit ${r.status}`}`;
  return undefined;
}

/** Probes the host. `want` caps the level (a weaker level may be asked for; a stronger one than the
 * host offers is an error the caller raises). */
export function probeHost(opts: { cgroupName: string; cgroupParent?: string; want?: IsolationLevel; disk?: boolean }): ProbeResult {
  const notes: string[] = [];
  const wantIdx = opts.want ? LEVELS.indexOf(opts.want) : 0;
  const bwrapError = wantIdx <= 1 ? probeBwrap() : "not requested";
  if (bwrapError && wantIdx <= 1) notes.push(`no root view or namespaces: ${bwrapError}`);
  let cgroups: CgroupLayout | undefined;
  if (wantIdx === 0 && !bwrapError) {
    const found = detectCgroups(opts.cgroupName, opts.cgroupParent);
    cgroups = found.layout;
    if (found.reason) notes.push(`no cgroups: ${found.reason}`);
    if (cgroups) notes.push(...cgroups.notes);
  } else if (wantIdx === 0) {
    notes.push("no cgroups: cgroups are only used together with bwrap");
  }
  const level: IsolationLevel = bwrapError ? "process" : cgroups ? "bwrap+cgroup" : "bwrap";
  if (level === "process") {
    notes.push("process level: sandboxes see the host's file system and network; no limits; freeze/kill by signals to processes carrying the sandbox's marker");
    if (process.getuid?.() !== 0) notes.push("not root: commands run as the agent's own user, whatever user is asked for");
  }
  const limits = cgroups ? { ...cgroups.limits } : { cpu: false, memory: false, pids: false };
  if (level !== "bwrap+cgroup") notes.push("no cpu/memory/pids limits without cgroups");
  notes.push("no memory snapshot: CRIU 3.17 fails on kernels >= 6.13 (criu#2532)");
  const ns = level !== "process";
  // A disk of its own only means something where the sandbox sees nothing else to write to.
  const disk = !ns ? { level: "none" as const, reason: "at process level sandboxes write anywhere the agent's user may" } : opts.disk === false ? { level: "none" as const, reason: "turned off (KRUISE_LOCAL_DISK=off)" } : probeDisk();
  notes.push(disk.level === "quota" ? "disk: quota (a loop-mounted ext4 image per sandbox of the template's diskSizeMB; ENOSPC inside when full)" : `disk: none, sandboxes can fill the host's disk: ${disk.reason}`);
  return {
    cgroups,
    capabilities: {
      level,
      rootView: ns,
      networkIsolation: ns,
      limits,
      disk: disk.level,
      freeze: cgroups ? "cgroup" : "signal",
      kill: cgroups ? "cgroup" : ns ? "namespace" : "signal",
      snapshotFs: true,
      memorySnapshot: false,
      survivesAgentRestart: true,
      hostView: true,
      notes,
    },
  };
}
