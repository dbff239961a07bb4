// Condition types, reasons and phases of the CRDs (OpenKruise Agents §1.1.2, §1.4). Each reason
// says exactly when it is set; the driver writes only these, so `kubectl get -o yaml` readers and
// tests can rely on the spelling.
import { z } from "zod";

/** Sandbox phases. There is no Pausing phase: pause is observed as Paused once the pod is gone
 * (Stop) or frozen (Freeze). */
export const SandboxPhase = z.enum(["Pending", "Running", "Paused", "Resuming", "Upgrading", "Succeeded", "Failed", "Recycling", "Terminating"]);
export type SandboxPhase = z.infer<typeof SandboxPhase>;

export const ConditionStatus = z.enum(["True", "False", "Unknown"]);

export const Condition = z.object({
  type: z.string().min(1),
  status: ConditionStatus,
  reason: z.string().min(1),
  message: z.string().default(""),
  lastTransitionTime: z.string(),
  observedGeneration: z.int().min(0).optional(),
});
export type Condition = z.infer<typeof Condition>;

export const SandboxConditionType = {
  /** The pod is Ready and the runtime answers. */
  Ready: "Ready",
  /** The sandbox is paused; reason says how far the pause got. */
  SandboxPaused: "SandboxPaused",
  /** Set while and after a Stop-paused sandbox gets a new pod. */
  SandboxResumed: "SandboxResumed",
  /** The data plane (the agent-runtime container): ready, or restarting after its liveness probe
   * failed or it exited; the kubelet restarts it in the same pod, so the sandbox is kept. */
  RuntimeHealthy: "RuntimeHealthy",
  /** A claim's dynamic CSI mounts are made in the current pod (False: which failed and why). */
  VolumesMounted: "VolumesMounted",
  /** An update ops CheckpointRestore recreate's checkpoint is not restored yet: the sandbox's next
   * pod names it (a Stop-paused sandbox's resume pod). Removed once such a pod exists. */
  RestorePending: "RestorePending",
  /** The local driver: whether the sandbox's holder (its pid 1) runs under the driver's seccomp
   * filter. Set only where it did not: False with reason `UnfilteredHolder` when an agent adopted a
   * claimed sandbox whose holder an older agent started without the filter (a process of the
   * sandbox may ptrace it and make the calls the filter refuses); True with reason
   * `HolderRestarted` once a Stop pause or an update ops recreate gave it a filtered holder.
   * Absent for every other sandbox (the edge keeps the last one it was told). */
  SeccompFiltered: "SeccompFiltered",
  /** The local driver: whether the sandbox's holder runs in a user namespace of its own (root
   * inside an unprivileged host uid). Set only where it did not, as SeccompFiltered: False with
   * reason `HostRootHolder` when an agent that makes user namespaces adopted a claimed sandbox an
   * agent without them started (root inside is the host's root, without capabilities); True with
   * reason `HolderRestarted` once its holder restarted in a range of its own. */
  UserNamespaced: "UserNamespaced",
} as const;

/** The reasons of SandboxConditionType.SeccompFiltered. */
export const SeccompFilteredReason = {
  UnfilteredHolder: "UnfilteredHolder",
  HolderRestarted: "HolderRestarted",
} as const;

/** The reasons of SandboxConditionType.UserNamespaced. */
export const UserNamespacedReason = {
  HostRootHolder: "HostRootHolder",
  HolderRestarted: "HolderRestarted",
} as const;

/** The reason a sandbox reports while its restore is pending (the condition above): the edge keeps
 * the update ops run's snapshot until a report without it. */
export const RESTORE_PENDING = "RestorePending";

export const ReadyReason = {
  /** Every container of the pod is ready. */
  PodReady: "PodReady",
  /** The pod exists but no node accepted it yet (no kubelet, insufficient resources, taints). */
  Unschedulable: "Unschedulable",
  /** A container is Waiting with ErrImagePull / ImagePullBackOff / InvalidImageName. */
  ImagePullFailed: "ImagePullFailed",
  /** A container is Waiting for a reason other than pulling or creating (CrashLoopBackOff, ...). */
  StartContainerFailed: "StartContainerFailed",
  /** The API server refused the pod as invalid (422): final. A refusal that may clear (quota,
   * admission) is a ReconcileError while it is retried. */
  PodCreateFailed: "PodCreateFailed",
  /** The pod is created and starting (ContainerCreating, PodInitializing, not yet ready). */
  PodStarting: "PodStarting",
  /** The sandbox is paused: no pod runs (Stop) or its processes are frozen (Freeze). */
  Paused: "Paused",
  /** A change of the sandbox failed and the agent retries it with backoff (message: the error);
   * it is not Failed. Replaced by the pod's own reason once a pass succeeds. */
  ReconcileError: "ReconcileError",
  /** The local driver: the sandbox's init process (pid 1) ended and the sandbox starts again
   * (files kept, processes gone), at once or after a backoff when it ended soon after its last
   * restart. The edge shows it not ready (its phase stays Running) and its gateway holds requests
   * for it until it is back (a bounded wait, then "retry"), instead of forwarding them to a
   * runtime that has no sandbox by that id meanwhile. */
  Pid1Restarting: "Pid1Restarting",
  /** The desired sandbox cannot be made as asked (e.g. a team name that is no namespace name); final. */
  InvalidSpec: "InvalidSpec",
  /** The sandbox is governed (egress rules, a TrafficPolicy or SecurityProfile selects it, or its
   * template lists traffic-proxy) but its template asks for what would escape the traffic-proxy
   * (hostNetwork, hostPath, privileged, NET_ADMIN, ...; the message lists each); final. */
  UnsafePodSpec: "UnsafePodSpec",
} as const;
export type ReadyReason = (typeof ReadyReason)[keyof typeof ReadyReason];

export const PausedReason = {
  /** Pause requested; the pod is still terminating. */
  Pending: "Pending",
  /** Stop pause: the pod is gone, PVCs are kept. */
  StopPauseSucceed: "StopPauseSucceed",
  /** Freeze pause: the runtime froze every process; the pod keeps its memory. */
  FreezePauseSucceed: "FreezePauseSucceed",
} as const;

export const ResumedReason = {
  /** A Stop-paused sandbox got a fresh pod. */
  CreatePod: "CreatePod",
  /** A frozen sandbox was thawed. */
  ResumePod: "ResumePod",
} as const;

/** SandboxClaim (§1.4). */
export const ClaimPhase = z.enum(["Claiming", "Completed"]);
export const ClaimCompletedReason = {
  AllReplicasClaimed: "AllReplicasClaimed",
  TimeoutReached: "TimeoutReached",
  SandboxSetNotFound: "SandboxSetNotFound",
  /** A label or annotation the API server would refuse on a Sandbox (or a reserved key). */
  InvalidMetadata: "InvalidMetadata",
} as const;

/** Kubernetes Event reasons the driver emits on a Sandbox. */
export const EventReason = {
  PodCreated: "PodCreated",
  PodDeleted: "PodDeleted",
  FailedScheduling: "FailedScheduling",
  ImagePullFailed: "ImagePullFailed",
  Claimed: "Claimed",
  Paused: "Paused",
  Resumed: "Resumed",
  InplaceUpdated: "InplaceUpdated",
  /** On the Sandbox: an in-place image the injection config's pod-policy.inplaceImages does not allow (Warning; the sandbox fails). */
  InplaceImageRefused: "InplaceImageRefused",
  /** On the Sandbox: its pod was replaced by one from a new template revision (update ops). */
  Recreated: "Recreated",
  /** The first failure of a retried change (Warning; the Ready condition carries the latest). */
  ReconcileError: "ReconcileError",
  /** On the injection ConfigMap: refused (Warning; the last good config stays in force). */
  InvalidInjectionConfig: "InvalidInjectionConfig",
  /** On the injection ConfigMap: accepted after a refusal (Normal). */
  InjectionConfigApplied: "InjectionConfigApplied",
  /** On the Sandbox: its agent-runtime container was restarted by the kubelet (Warning). */
  RuntimeRestarted: "RuntimeRestarted",
  /** On the Sandbox: a dynamic CSI mount failed (Warning; retried). */
  VolumeMountFailed: "VolumeMountFailed",
  /** On the Sandbox: its probes/autoPausePolicy cannot be run by the edge (Warning; why). */
  AutoPausePolicyNotApplied: "AutoPausePolicyNotApplied",
  /** On the Sandbox: its spec.lifecycle cannot be taken by the edge (Warning; why). */
  LifecycleNotApplied: "LifecycleNotApplied",
  /** On a Sandbox whose sandbox-id annotation names a sandbox of another namespace: ignored (Warning). */
  ForeignSandboxId: "ForeignSandboxId",
  /** On the Sandbox: its pod's policy would not fit its ConfigMap or Secret (Warning; the running
   * pod keeps what it had). */
  PolicyTooLarge: "PolicyTooLarge",
  /** On the Sandbox, and once per template revision on its SandboxSet: its template cannot be
   * governed (Warning; the message lists what; see ReadyReason.UnsafePodSpec). */
  UnsafePodSpec: "UnsafePodSpec",
  /** On the Sandbox: user annotations under a platform prefix (user-metadata.ts platformPrefix)
   * were not put on its pod (Warning; the edge refuses them now: sandboxes it took before still carry them). */
  MetadataDropped: "MetadataDropped",
} as const;

/** Returns `conditions` with `next` set, keeping lastTransitionTime when the status did not change. */
export function setCondition(conditions: Condition[] | undefined, next: Omit<Condition, "lastTransitionTime">, now: string): Condition[] {
  const list = conditions ?? [];
  const old = list.find((c) => c.type === next.type);
  const lastTransitionTime = old && old.status === next.status ? old.lastTransitionTime : now;
  return [...list.filter((c) => c.type !== next.type), { ...next, lastTransitionTime }];
}
