// The seam between agent-runtime and whatever hosts the sandbox.
//
// One runtime process can serve many sandboxes (the local driver routes requests by the
// `E2b-Sandbox-Id` header) or exactly one (a Kubernetes pod, or the runtime started on its own,
// where the view is the host itself). Everything the runtime does that depends on *where* the
// sandbox lives goes through a SandboxView: how a sandbox path maps to a host path for file
// operations, which users exist, and how to start a process inside the sandbox. The runtime
// never builds host paths or argv for a sandbox by itself.
import type { PinnedPath } from "./pinned-path.ts";
import type { ProcessLauncher } from "./process/launcher.ts";

/** A user as the sandbox sees it (its own /etc/passwd, not the host's). */
export interface SandboxUser {
  name: string;
  uid: number;
  gid: number;
  home: string;
  /** Login shell; `/bin/bash` for the `base` template. */
  shell: string;
}

/** A process the runtime wants started inside the sandbox. Paths are sandbox paths. */
export interface SpawnRequest {
  cmd: string;
  args: string[];
  cwd: string;
  env: Record<string, string>;
  user: SandboxUser;
}

/** What the runtime actually executes on the host to satisfy a SpawnRequest (pipes or PTY). */
export interface HostCommand {
  file: string;
  args: string[];
  cwd: string;
  /** The environment of the host process itself. Where that process is a wrapper with host
   * privileges (the local driver's enter.pl), it is fixed by the view and holds nothing a tenant
   * sent: the command's own environment is `sandboxEnv`. */
  env: Record<string, string>;
  /** The environment of the command the wrapper starts inside the sandbox. The launcher hands it
   * over in a private file (NUL-separated `NAME=value`), never through the wrapper's environment
   * or argv (argv is readable by every user on the host), and puts the file's path in place of
   * the argument `SANDBOX_ENV_FILE` (launcher.ts). */
  sandboxEnv?: Record<string, string>;
  /** Set when the host process itself must switch user (the host view); wrappers such as
   * bwrap or nsenter switch user inside the sandbox instead and leave these unset. */
  uid?: number;
  gid?: number;
}

/** Raised when a sandbox path cannot be mapped (outside the sandbox, or through a symlink that
 * escapes it). The runtime answers it as Connect `permission_denied` / HTTP 403. */
export class PathOutsideSandboxError extends Error {
  readonly path: string;
  constructor(path: string) {
    super(`path ${path} is outside the sandbox`);
    this.path = path;
    this.name = "PathOutsideSandboxError";
  }
}

/** Raised by a view's operation when its sandbox no longer runs (the driver's
 * SandboxNotFoundError is one). The runtime answers it as e2b answers for a dead sandbox: Connect
 * `unavailable`, HTTP 502, which the SDK turns into its "sandbox was killed or timed out" error,
 * not an internal error nor a missing path. */
export class SandboxGoneError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SandboxGoneError";
  }
}

/** Resource figures of one sandbox read from its own accounting (a cgroup), not the host's. */
export interface SandboxUsage {
  /** Bytes charged to the sandbox now. */
  memUsed: number;
  /** The sandbox's memory limit in bytes; undefined when none is enforced. */
  memLimit?: number;
  /** Page cache charged to the sandbox, bytes. */
  memCache?: number;
  /** CPU time the sandbox has used so far, microseconds (monotonic). */
  cpuUsageUsec?: number;
  /** CPUs the sandbox may use (quota / period); undefined when not limited. */
  cpuLimit?: number;
}

export interface PinOptions {
  /** False keeps a final symlink itself (as toHost's). */
  followFinal?: boolean;
  /** Missing directories above the target end the walk instead of failing it (PinnedPath.missing),
   * for an operation that makes them. */
  create?: boolean;
}

export interface SandboxView {
  /** Maps an absolute sandbox path to the host path to operate on. Symlinks are resolved the way
   * the sandbox would see them; a result that leaves the sandbox throws PathOutsideSandboxError.
   * `followFinal` false keeps a final symlink itself (stat of a link, remove of a link). */
  toHost(sandboxPath: string, opts?: { followFinal?: boolean }): string;
  /** toHost for a file operation: the target's directory held open, reached without the kernel
   * following any link (pinned-path.ts), for the operation to name its target through. Absent:
   * toHost's result walked from the host's `/` (a view whose paths are the host's own). */
  pin?(sandboxPath: string, opts?: PinOptions): PinnedPath;
  /** The inverse of toHost, for paths the runtime reports (ListDir, watch events, Move). */
  toSandbox(hostPath: string): string;
  lookupUser(name: string): SandboxUser | undefined;
  /** Names for the owner and group columns of EntryInfo; absent or undefined means "show the
   * number" (envd does the same for ids missing from the sandbox's user database). */
  userName?(uid: number): string | undefined;
  groupName?(gid: number): string | undefined;
  /** The host's ids for a sandbox user's uid and gid, given to files the runtime creates for that
   * user (with a user namespace they differ). Absent: the same ids. */
  hostOwner?(uid: number, gid: number): { uid: number; gid: number };
  /** Builds the host command that runs `req` inside the sandbox. */
  command(req: SpawnRequest): HostCommand;
  /** Who starts host commands; absent means the runtime forks them itself. */
  launcher?: ProcessLauncher;
  /** Stops / resumes every process of the sandbox (a cgroup freezer where the view has one).
   * Absent means the runtime falls back to SIGSTOP/SIGCONT of the process groups it started. */
  freeze?(): Promise<void>;
  thaw?(): Promise<void>;
  /** The sandbox's own memory and CPU. Absent (or undefined) where the view is the host itself,
   * and GET /metrics reports the host's figures. */
  usage?(): SandboxUsage | undefined;
}
