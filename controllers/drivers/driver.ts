// The one interface every sandbox driver implements (`local` today, `kubernetes` next). The agent's
// reconciler only talks to this: it hands a driver the desired state of one sandbox and reads back
// what is actually there. Every method is idempotent, so a repeated intent or an agent restart is
// harmless. A driver that cannot do something says so with UnsupportedError; it never returns a
// success that did nothing. Errors say whether to retry: TerminalError (and UnsupportedError) is
// final for that spec, anything else is transient (docs/ARCHITECTURE.md, "Error model").
import type { TrafficPolicyEntry } from "../../schema/api/traffic-policy.ts";
import type { SecurityProfileEntry } from "../../schema/api/security-profile.ts";
import type { NetworkAuditRecord } from "../../schema/api/network-audit.ts";
import type { Duplex } from "node:stream";
import type { EgressPolicy } from "../../schema/protocol/egress.ts";
import type { ObservedCondition } from "../../schema/protocol/observation.ts";
import { SandboxGoneError, type SandboxView, type SpawnRequest } from "../runtime/sandbox-view.ts";

/** How strongly a driver separates sandboxes from the host and from each other, strongest first. */
export type IsolationLevel = "kubernetes" | "bwrap+cgroup" | "bwrap" | "process";

/** What a sandbox should be. `generation` increases with every change of intent; observations
 * carry the generation they were made for, so the caller can drop stale ones. */
export interface DesiredSandbox {
  id: string;
  generation: number;
  /** Root filesystem / image name (the protocol's `template.image`, not the template id); the
   * local driver has `base` (users `root` and `user`). */
  template: string;
  /** The template's revision. A claimed sandbox whose revision changes is recreated (an update
   * ops run's Recreate): a new runtime from the new template, on the same files where the driver
   * keeps them (local: its disk; kubernetes: its PVCs). */
  revision?: string;
  state: "Running" | "Paused";
  /** Used when `state` is Paused. Freeze keeps memory and releases CPU; Stop keeps the writable
   * layer (`/home/user`, `/tmp`, `/root`), ends every process, and the next Running starts fresh
   * processes on the same files. */
  pauseStrategy: "Freeze" | "Stop";
  /** `diskSizeMB`: the most the sandbox can write (its disk), when the driver can limit it. */
  resources: { cpuCount: number; memoryMB: number; pidsMax?: number; diskSizeMB?: number };
  /** False: the sandbox gets no network at all (not even the host's loopback). */
  allowInternetAccess: boolean;
  /** E2B egress rules (`network.allowOut/denyOut`) to enforce; null or absent: none. */
  egress?: EgressPolicy | null;
  /** E2B `network.rules` (header transforms with secret placeholders); the values are given
   * apart (`Driver.setSandboxSecrets`), held in memory only. */
  networkRules?: Record<string, { transform?: { headers?: Record<string, string> } }[]>;
  /** Start the sandbox's private state (its disk, or its layer) as a copy of this snapshot when
   * it is first created; its own identity (hostname, hosts) is written over the snapshot's. */
  restoreFrom?: Pick<SnapshotRef, "id">;
  /** An update ops run's CheckpointRestore: replace the sandbox's private state with this
   * snapshot's as it is recreated, once per snapshot id (kubernetes: the recreated pod names the
   * snapshot's checkpoint for the cluster's checkpoint engine to restore). */
  restoreFs?: Pick<SnapshotRef, "id">;
  /** The template serves E2B's code interpreter on port 49999 (`codeInterpreter: true`): drivers
   * whose runtime runs apart from the agent (kubernetes: the pod's sidecar) start it with the
   * interpreter; the local driver's embedded runtime reads it from the intent itself. */
  codeInterpreter?: boolean;
  /** Its processes may make user namespaces of their own (the template's operator-set
   * `nestedUserNamespaces`): the local driver's seccomp filter refuses them otherwise. */
  nestedUserNamespaces?: boolean;
  /** The pool (template id = SandboxSet name) the sandbox is built from, for drivers that build
   * sandboxes from a pool's own spec (kubernetes: the SandboxSet's pod template). */
  pool?: string;
  /** False while an unclaimed warm-pool member, true once claimed or created on demand. */
  claimed?: boolean;
  /** A claim's change of the running sandbox in place (SandboxClaim `inplaceUpdate`), for drivers
   * that can (kubernetes: the main container's image, and CPU through the pod's `resize`
   * subresource; the pod, its IP and PVCs stay). Others ignore it. */
  inplaceUpdate?: InplaceUpdate;
  /** User labels (E2B metadata `label:<k>`, SandboxClaim `labels`), for drivers whose sandboxes
   * are objects that carry labels (kubernetes: the Sandbox and its Pod); others ignore them. */
  labels?: Record<string, string>;
  /** User annotations (E2B metadata, SandboxClaim `annotations`), likewise (kubernetes: the
   * Sandbox and its Pod); others ignore them. */
  annotations?: Record<string, string>;
  /** The owning team's namespace, for drivers that place sandboxes in namespaces (kubernetes:
   * the Sandbox, Pod and PVCs go there); absent: the driver's own namespace. */
  namespace?: string;
  /** The runtime's access token; given only to drivers without a host view (their runtime is
   * elsewhere and the driver calls it, e.g. to freeze). */
  accessToken?: string | null;
}

export interface InplaceUpdate {
  image?: string;
  cpuCount?: number;
}

export type SandboxPhase = "Pending" | "Running" | "Paused" | "Stopped" | "Failed";

/** What a driver found for one sandbox. */
export interface SandboxObservation {
  id: string;
  /** The generation of the last `ensure` that reached this sandbox (from the driver's records). */
  generation: number;
  phase: SandboxPhase;
  /** Set for Paused/Stopped: which strategy produced it. */
  pauseStrategy?: "Freeze" | "Stop";
  level: IsolationLevel;
  createdAt: string;
  /** Which parts of `resources`/`allowInternetAccess` are actually enforced for this sandbox. */
  enforced: { cpu: boolean; memory: boolean; pids: boolean; network: boolean; disk?: boolean };
  /** Why the phase is what it is, for Failed in particular. */
  message?: string;
  /** Pending only: nothing changes for this long (the local driver's restart backoff), so the
   * next pass for this sandbox waits as long rather than polling. */
  retryAfterMs?: number;
  /** Drivers without a host view (capabilities.hostView false): the runtime's own address, and
   * whether the sandbox is ready for it, with a CamelCase reason when not. */
  endpoint?: string;
  ready?: boolean;
  /** The sandbox's own IP address (the local sandbox's on the bridge, a pod's IP), when it has
   * one: OpenKruise's `return-sandbox-ip` reports it. */
  address?: string;
  reason?: string;
  /** Names the sandbox's current processes as a whole (the local driver: its holder's pid and
   * start time); a new value means every process was replaced (a Stop pause's resume, an update
   * ops recreate), so what ran in the old ones (the template's start command) runs again. None:
   * no processes, or a driver that cannot tell. */
  incarnation?: string;
  /** Conditions of the driver's own about this sandbox (schema/crd/conditions.ts; the local
   * driver's `SeccompFiltered`), reported to the edge as they are. */
  conditions?: ObservedCondition[];
}

/** A saved writable state (the local driver: the sandbox's disk image, or its layer directory).
 * Opaque to callers except for `id`, which is all a driver needs to find it again. */
export interface SnapshotRef {
  id: string;
  sandboxId: string;
  /** Driver-specific location (a directory under the data dir for `local`). */
  location: string;
  bytes: number;
  createdAt: string;
}

export interface ExecResult {
  exitCode: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
}

/** What a driver can and cannot do on this host, probed once at start. */
export interface DriverCapabilities {
  level: IsolationLevel;
  /** Sandboxes see their own root (read-only base, writable layer, synthetic /etc). */
  rootView: boolean;
  /** `allowInternetAccess: false` is enforceable. */
  networkIsolation: boolean;
  limits: { cpu: boolean; memory: boolean; pids: boolean };
  /** How a sandbox's writes are bounded: `quota`, a disk of its own of `diskSizeMB` (ENOSPC
   * inside when full); `none`, not at all. Absent: the driver does not say. */
  disk?: "quota" | "none";
  /** `cgroup`: atomic freeze of the whole tree. `signal`: SIGSTOP/SIGCONT to every process the
   * driver can find, which a process forking at that moment may outrun. */
  freeze: "cgroup" | "signal";
  /** `cgroup`: cgroup.kill. `namespace`: SIGKILL to the pid namespace's init.
   * `signal`: SIGKILL to every process the driver can find. */
  kill: "cgroup" | "namespace" | "signal";
  /** Writable layer save/restore (snapshotFs, restoreFs, Stop pause). */
  snapshotFs: boolean;
  /** Process memory checkpoint (CRIU). False everywhere today: CRIU 3.17 fails on kernels ≥ 6.13. */
  memorySnapshot: boolean;
  /** Sandboxes keep running when the agent process exits and are adopted by the next one. */
  survivesAgentRestart: boolean;
  /** `view()` gives a SandboxView for a runtime on this host (a shared agent-runtime). */
  hostView: boolean;
  /** false: each sandbox's pid 1 is the isolation's own, which its tenant can end, because the
   * host cannot run the driver's init (the notes say why; the agent names it in the isolation it
   * reports to the edge). Absent: the driver does not say (the init runs, or the level has none). */
  sandboxInit?: false;
  /** One line per missing capability, saying why. */
  notes: string[];
}

export interface Driver {
  readonly name: string;
  readonly capabilities: DriverCapabilities;
  /** Converges the sandbox to `desired` (create, freeze, thaw, stop, restart) and returns what is
   * there afterwards. */
  ensure(desired: DesiredSandbox): Promise<SandboxObservation>;
  /** The sandbox as it is now, or undefined when the driver has no trace of it. */
  observe(id: string): Promise<SandboxObservation | undefined>;
  /** Every sandbox the driver has a trace of (records and live processes), including broken ones
   * (phase Failed), so a restarted agent can adopt the live ones and destroy the rest. */
  list(): Promise<SandboxObservation[]>;
  /** Location-dependent operations for a runtime on this host. Throws UnsupportedError when
   * `capabilities.hostView` is false, SandboxNotFoundError for an unknown or non-running id. */
  view(id: string): SandboxView;
  /** A stream connected to a user port on the sandbox's own loopback, for drivers whose
   * sandboxes have a network the host cannot dial (the local driver's allowInternetAccess:false).
   * Rejects with SandboxNotFoundError when the sandbox does not run, and with the reason (e.g.
   * connection refused) when nothing listens. */
  connectUserPort?(id: string, port: number): Promise<Duplex>;
  /** A remote runtime (a pod's) is never open: the tokens it may hold now, most likely first (its
   * pod's own until a claim's /init set the claim's). The agent presents them to /init. */
  runtimeTokens?(id: string): string[];
  /** A claim's /init went through: the runtime now holds `token` (empty: none). */
  runtimeInitialized?(id: string, token: string): void;
  /** Runs a command inside a running sandbox to completion (tests, hooks, probes). */
  exec(id: string, req: SpawnRequest, opts?: { timeoutMs?: number; stdin?: string }): Promise<ExecResult>;
  freeze(id: string): Promise<void>;
  thaw(id: string): Promise<void>;
  /** Saves the writable state as snapshot `snapshotId` (a new id when absent; taking one that
   * exists returns it); the sandbox keeps its state (a running one is frozen while saved when the
   * driver can freeze atomically, then put back). Snapshots survive agent restarts. */
  snapshotFs(id: string, snapshotId?: string): Promise<SnapshotRef>;
  /** Replaces the writable layer's contents with a snapshot's. */
  restoreFs(id: string, snapshot: Pick<SnapshotRef, "id">): Promise<void>;
  /** Frees a snapshot (unknown ids are fine); sandboxes made from it keep their own copies. */
  deleteSnapshot(snapshot: Pick<SnapshotRef, "id">): Promise<void>;
  /** Replaces the TrafficPolicies / GlobalTrafficPolicies in force (the edge's whole set); a
   * sandbox they select has every connection decided by them. Absent: the driver has no data
   * plane for them (the agent says so). */
  setTrafficPolicies?(policies: TrafficPolicyEntry[]): Promise<void>;
  /** Replaces the SecurityProfiles / GlobalSecurityProfiles in force (the edge's whole set); a
   * sandbox they select has its HTTP(S) egress inspected by them. Absent: not enforced here. */
  setSecurityProfiles?(profiles: SecurityProfileEntry[]): Promise<void>;
  /** Where the driver's L7 proxy sends one audit record per inspected request (set by the agent). */
  setNetworkAudit?(sink: (record: NetworkAuditRecord) => void): void;
  /** The values of the secrets a sandbox's `networkRules` name, from the edge with its intent;
   * kept in memory only (the proxy adds them to requests; the sandbox never sees them). Absent:
   * the driver cannot inject credentials. */
  setSandboxSecrets?(id: string, values: Record<string, string>): void;
  /** Per team, the values of the secrets the SecurityProfiles' `tokenTransformation`s name, from
   * the edge with each profile set (replacing the last); memory only, like setSandboxSecrets. */
  setProfileSecrets?(byTeam: Record<string, Record<string, string>>): void;
  /** Ends every process, removes cgroups and the writable layer. Unknown ids are fine. */
  destroy(id: string): Promise<void>;
}

/**
 * A failure that trying again cannot fix: a spec that is invalid or asks for what this driver
 * cannot do (a template that cannot exist, an unsupported capability). The reconciler reports it
 * as phase Failed at once. Every other error a driver throws is transient: the reconciler reports
 * `Ready=False` with its message and retries with backoff, and the sandbox is kept.
 */
export class TerminalError extends Error {
  /** CamelCase reason for the Ready condition and the observation (e.g. `InvalidSpec`). */
  readonly reason: string;
  constructor(reason: string, message: string) {
    super(message);
    this.name = "TerminalError";
    this.reason = reason;
  }
}

export function isTerminal(err: unknown): err is TerminalError {
  return err instanceof TerminalError;
}

/** A capability this driver lacks on this host (terminal: asking again gives the same answer). */
export class UnsupportedError extends TerminalError {
  readonly capability: string;
  constructor(capability: string, reason: string) {
    super("Unsupported", `${capability} is not supported: ${reason}`);
    this.name = "UnsupportedError";
    this.capability = capability;
  }
}

/** Transient where ensure meets it (a pod not up yet): only a TerminalError is final. A
 * SandboxGoneError, so the runtime answers a view's "not running" as e2b's dead sandbox. */
export class SandboxNotFoundError extends SandboxGoneError {
  readonly sandboxId: string;
  constructor(sandboxId: string, detail = "not found") {
    super(`sandbox ${sandboxId}: ${detail}`);
    this.name = "SandboxNotFoundError";
    this.sandboxId = sandboxId;
  }
}
