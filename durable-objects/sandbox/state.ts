// A sandbox's state (one SandboxGroupDO row): what it is (spec, fixed at create) and where it is
// (phase, conditions, timers). Phases and condition vocabulary follow OpenKruise's Sandbox
// (openkruise-agents.md §1.1, §2.1), plus `Pausing` (E2B pause is asynchronous here).
import type { Endpoint, InplaceUpdate, PauseStrategy, TemplateSpec } from "../../schema/protocol/index.ts";
import type { Refusal } from "../../schema/errors.ts";
import type { SandboxNetworkConfig } from "../../schema/api/sandbox.ts";
import type { Lifecycle } from "../../schema/api/hooks.ts";
import { ReadyReason, SandboxConditionType } from "../../schema/crd/conditions.ts";

export type Phase = "Pending" | "Running" | "Pausing" | "Paused" | "Resuming" | "Terminating" | "Failed";

export type ConditionType = "Ready" | "SandboxPaused" | "SandboxResumed" | "RuntimeInitialized" | "Upgrading" | HookConditionType | DriverConditionType;
/** Conditions the agent's driver reports of its own, mirrored as told (machine.ts). */
export const DRIVER_CONDITIONS = [SandboxConditionType.SeccompFiltered, SandboxConditionType.UserNamespaced] as const;
export type DriverConditionType = (typeof DRIVER_CONDITIONS)[number];
/** One per lifecycle hook (hooks/run-hook.ts): its last run. */
export type HookConditionType = "PrePauseHook" | "PostResumeHook" | "PreUpgradeHook" | "PostUpgradeHook";

export interface Condition {
  type: ConditionType;
  status: "True" | "False" | "Unknown";
  /** CamelCase; see machine.ts for each reason's meaning. */
  reason: string;
  message?: string;
  lastTransitionTime: number;
}

/** Fixed at create. */
export interface SandboxSpec {
  id: string;
  teamId: string;
  /** The team's name (= Kubernetes namespace); absent in sandboxes created before it was kept. */
  teamName?: string;
  /** The key that created it (kept, not an owner: access is by team). */
  keyId: string;
  templateId: string;
  cluster: string;
  template: TemplateSpec;
  envdVersion: string;
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  envVars: Record<string, string>;
  metadata: Record<string, string>;
  labels: Record<string, string>;
  /** For the sandbox's cluster objects; absent in sandboxes created before it was kept. */
  annotations?: Record<string, string>;
  /** As the client set it; null when not set (reported as such, enforced as true). */
  allowInternetAccess: boolean | null;
  network: SandboxNetworkConfig | null;
  volumeMounts: { name: string; path: string }[];
  lifecycle: { onTimeout: "kill" | "pause"; autoResume: boolean; timeoutPauseStrategy: PauseStrategy };
  /** Default strategy of a manual pause without `memory` (the template's). */
  pauseStrategy: PauseStrategy;
  /** How long a paused sandbox is kept before deletion; null keeps it forever. */
  pausedRetentionMs: number | null;
  /** `e2b.agents.kruise.io/never-timeout`: no end of life at all. */
  neverTimeout: boolean;
  /** `e2b.agents.kruise.io/return-sandbox-ip`: its metadata shows `address` (read models). */
  returnSandboxIp?: boolean;
  envdAccessToken: string | null;
  trafficAccessToken: string | null;
  /** The create's in-place change of the claimed member (image, CPU), sent with every intent so
   * a redelivered or later one (pause, resume) still asks for it. */
  inplaceUpdate?: InplaceUpdate;
  /** Made from this snapshot: every intent names it (a sandbox lost on its cluster is remade so). */
  restoreFrom?: { id: string };
  /** Its own lifecycle hooks (a Sandbox's `spec.lifecycle` set with kubectl), ahead of the template's. */
  hooks?: Lifecycle;
}

/** One step taken on the sandbox, Kubernetes-Event-like (newest last, bounded MAX_SANDBOX_EVENTS):
 * an update ops run's steps on it, each lifecycle hook's run. The Kubernetes driver also makes
 * these Events on the Sandbox object; this list is where a team without Kubernetes sees them
 * (GET /admin/sandboxes/{id}, the console's timeline). */
export interface SandboxNote {
  at: number;
  type: "Normal" | "Warning";
  reason: string;
  message: string;
  /** Who took the step, e.g. `SandboxUpdateOps roll`, `lifecycle hook`. */
  source: string;
}

export const MAX_SANDBOX_EVENTS = 50;

export interface SandboxState {
  spec: SandboxSpec;
  phase: Phase;
  conditions: Condition[];
  /** Steps taken on it (absent: none yet). */
  events?: SandboxNote[];
  /** Generation of the newest intent sent; observations of older ones are dropped. */
  generation: number;
  observedGeneration: number;
  desired: "running" | "paused" | "deleted";
  /** Strategy of the current (or last) pause. */
  pauseStrategy: PauseStrategy;
  startedAt: number;
  /** End of life while running (ms); null when never-timeout. */
  endAt: number | null;
  /** Times its timeout's auto-pause was put off because the team quota could not answer (absent:
   * none since its last pause). */
  timeoutPauseDeferrals?: number;
  /** While paused: deletion time; null keeps it. */
  retainUntil: number | null;
  /** While terminating: forget the sandbox at this time even without the agent's confirmation. */
  purgeAt: number | null;
  /** When it was killed. From then on its index row is its tombstone (`indexRow`), written with
   * the kill, so its destroy writes nothing to the index. Absent on a sandbox killed before this
   * field was kept: its destroy writes the tombstone. */
  killedAt?: number;
  endpoint: Endpoint | null;
  /** The sandbox's own IP address, as its agent last observed it. */
  address?: string;
  /** Revision of the index row; bumped on every index write. */
  rev: number;
  /** The last upgrade an update ops run asked for (durable-objects/ops/): its target revision
   * and attempt (the idempotency key: the same pair is never applied twice), the generation of
   * its intent, whether the sandbox was paused then (it stays paused), and whether it finished. */
  upgrade?: SandboxUpgrade;
  /** The last resume that failed and was taken back to paused (machine.ts `resumeFailed`; absent:
   * none since the last resume that succeeded): the generation of that resume and the agent's
   * reason. The connect or wake that waits on that resume answers with it (409
   * `sandbox_resume_failed`); the SandboxResumed condition and a Warning on the event list
   * (`GET /admin/sandboxes/{id}`) keep the reason too. */
  resumeFailure?: ResumeFailure;
  /** A snapshot asked of the agent with the intent of `generation` (until its ack). */
  snapshot?: { id: string; generation: number } | null;
}

export interface ResumeFailure {
  /** The failed resume's generation (its rollback pause is the next one). */
  generation: number;
  /** The agent's CamelCase reason (e.g. ReadyCommandFailed, IntentRejected) and its message. */
  reason: string;
  message?: string;
  at: number;
}

export interface SandboxUpgrade {
  revision: string;
  attempt: number;
  generation: number;
  paused: boolean;
  done: boolean;
  /** CheckpointRestore: the snapshot whose files the sandbox is recreated on. */
  restoreFs?: string;
  /** CheckpointRestore of a paused sandbox: its restore may wait for its resume (the Kubernetes
   * driver's next pod names the checkpoint). From the reports at the upgrade's generation or later:
   * none yet (`unreported`: the upgrade is not done, an ack comes before its report), one with
   * reason RESTORE_PENDING (`pending`: done, the snapshot still needed), or one paused or running
   * ready without it (`restored`). */
  restore?: "unreported" | "pending" | "restored";
  /** The snapshot of the previous upgrade's restore, still owed when this upgrade (a
   * CheckpointRestore of its own) replaced it: held until this one is done. */
  replaces?: string;
  /** The ops run (its name) holding each of those snapshots, woken when its restore is no longer
   * owed, so it frees the snapshot without polling for it. */
  holders?: Record<string, string>;
  /** The update ops run that asked it (absent: asked before runs said so). */
  by?: string;
}

/** Who asks: sandboxes belong to the team (every key of it), the admin key sees all. */
export interface Access {
  teamId: string;
  admin: boolean;
  /** The caller's W3C trace context, when traced (sandboxHandle adds it). */
  traceparent?: string;
}

/** E2B's view of a phase: what `state` lists and getInfo report; killed/failed are never shown. */
export type VisibleState = "running" | "paused" | "killed" | "failed";

export function visibleState(phase: Phase): VisibleState {
  switch (phase) {
    case "Pending":
    case "Running":
      return "running";
    case "Pausing":
    case "Paused":
    case "Resuming":
      return "paused";
    case "Terminating":
      return "killed";
    case "Failed":
      return "failed";
    default:
      return assertNever(phase);
  }
}

/**
 * Whether the sandbox runs but its pid 1 is starting again (the agent's Ready reason
 * Pid1Restarting, told with a Pending report and kept by machine.ts `retrying`): its runtime has no sandbox
 * by that id until a report says it is ready (`becomeRunning`), so the gateway holds its requests
 * meanwhile. E2B's state says running all along, as the sandbox (files, timers) is kept.
 */
export function restarting(s: SandboxState): boolean {
  if (s.phase !== "Running") return false;
  const ready = s.conditions.find((c) => c.type === "Ready");
  return ready?.status === "False" && ready.reason === ReadyReason.Pid1Restarting;
}

export type Ok<T> = { ok: true } & T;
export type Result<T = object> = Ok<T> | { ok: false; error: Refusal };

export function assertNever(x: never): never {
  throw new Error(`unexpected ${JSON.stringify(x)}`);
}
