// Pure reading of what a pod (and its Sandbox) says: the driver's phase, readiness with a reason,
// and the Sandbox status the agent writes back. Kept free of I/O so the mapping is table-testable.
import type { V1ContainerStatus, V1Pod } from "@kubernetes/client-node";
import { RUNTIME_CONTAINER } from "../../../schema/crd/labels.ts";
import { PausedReason, ReadyReason, RESTORE_PENDING, SandboxConditionType, setCondition, type Condition, type SandboxPhase } from "../../../schema/crd/conditions.ts";
import type { SandboxPhase as DriverPhase } from "../driver.ts";

const PULL_ERRORS = new Set(["ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "RegistryUnavailable"]);
const STARTING = new Set(["ContainerCreating", "PodInitializing"]);

export interface PodReadiness {
  ready: boolean;
  reason: ReadyReason;
  message: string;
}

/** Why a pod is or is not Ready, in the Ready condition's vocabulary. */
export function podReadiness(pod: V1Pod): PodReadiness {
  const conds = pod.status?.conditions ?? [];
  const ready = conds.find((c) => c.type === "Ready");
  if (pod.status?.phase === "Running" && ready?.status === "True") return { ready: true, reason: ReadyReason.PodReady, message: "" };
  const scheduled = conds.find((c) => c.type === "PodScheduled");
  if (scheduled?.status === "False") return { ready: false, reason: ReadyReason.Unschedulable, message: scheduled.message ?? scheduled.reason ?? "unschedulable" };
  for (const cs of [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? [])]) {
    const waiting = cs.state?.waiting;
    if (!waiting?.reason || STARTING.has(waiting.reason)) continue;
    const message = `${cs.name}: ${waiting.reason}${waiting.message ? `: ${waiting.message}` : ""}`;
    return { ready: false, reason: PULL_ERRORS.has(waiting.reason) ? ReadyReason.ImagePullFailed : ReadyReason.StartContainerFailed, message };
  }
  return { ready: false, reason: ReadyReason.PodStarting, message: pod.status?.phase ?? "Pending" };
}

export interface SandboxFacts {
  paused: boolean;
  pauseStrategy: "Freeze" | "Stop";
  /** The runtime acknowledged a freeze for the current pod. */
  frozen: boolean;
  pod: V1Pod | undefined;
}

export interface SandboxState {
  driverPhase: DriverPhase;
  crPhase: SandboxPhase;
  ready: boolean;
  reason: ReadyReason;
  message: string;
}

/** The sandbox's state from its desired pause and its pod (absent, terminating, or live). */
export function sandboxState(f: SandboxFacts): SandboxState {
  const pod = f.pod;
  const terminating = Boolean(pod?.metadata?.deletionTimestamp);
  if (f.paused && f.pauseStrategy === "Stop") {
    if (!pod) return { driverPhase: "Stopped", crPhase: "Paused", ready: false, reason: ReadyReason.Paused, message: "" };
    return { driverPhase: "Running", crPhase: "Running", ready: false, reason: ReadyReason.Paused, message: "pod terminating for pause" };
  }
  // Frozen is Paused whether an intent or a direct freeze() did it: its processes do not run.
  if (f.frozen && pod && !terminating) return { driverPhase: "Paused", crPhase: "Paused", ready: false, reason: ReadyReason.Paused, message: "" };
  if (!pod || terminating) {
    return { driverPhase: "Pending", crPhase: f.paused ? "Paused" : "Resuming", ready: false, reason: ReadyReason.PodStarting, message: terminating ? "old pod terminating" : "creating pod" };
  }
  if (pod.status?.phase === "Failed" || pod.status?.phase === "Succeeded") {
    return { driverPhase: "Failed", crPhase: "Failed", ready: false, reason: ReadyReason.StartContainerFailed, message: pod.status.message ?? `pod ${pod.status.phase}` };
  }
  const r = podReadiness(pod);
  if (r.ready) return { driverPhase: "Running", crPhase: "Running", ...r };
  return { driverPhase: "Pending", crPhase: "Pending", ...r };
}

/** The state with a CheckpointRestore recreate's pod naming the checkpoint not made yet
 * (`restoring`: the checkpoint the Sandbox's mark names). Running: not done until that pod exists
 * (Pending, not ready). Paused: upgraded and paused, as asked (a Stop-paused sandbox's resume pod
 * names it), so its phase stays the paused one and the agent counts it converged (no requeue while
 * it rests paused); the reason tells the edge to keep the snapshot until a report without it. */
export function withPendingRestore(state: SandboxState, paused: boolean, restoring: string | undefined): SandboxState {
  if (!restoring) return state;
  const message = `the next pod restores checkpoint ${restoring}${paused ? " (made when the sandbox resumes)" : ""}`;
  return paused ? { ...state, reason: RESTORE_PENDING as ReadyReason, message } : { ...state, driverPhase: "Pending", ready: false, reason: RESTORE_PENDING as ReadyReason, message };
}

/** The runtime container's status (a regular container, or an init container run as a sidecar). */
export function runtimeContainer(pod: V1Pod | undefined): V1ContainerStatus | undefined {
  const all = [...(pod?.status?.containerStatuses ?? []), ...(pod?.status?.initContainerStatuses ?? [])];
  return all.find((c) => c.name === RUNTIME_CONTAINER);
}

/**
 * The `RuntimeHealthy` condition: the data plane answers (the container is ready), or it is being
 * restarted by the kubelet after its liveness probe failed or it exited. Pod status cannot tell a
 * probe kill from a crash, so the message gives the last exit as the kubelet recorded it.
 * Undefined while the pod has no status for the runtime (not started yet, or no pod).
 */
export function runtimeHealth(pod: V1Pod | undefined): Omit<Condition, "lastTransitionTime"> | undefined {
  const rt = runtimeContainer(pod);
  if (!rt) return undefined;
  const last = rt.lastState?.terminated;
  const restarts = rt.restartCount ?? 0;
  const lastExit = last ? `; last exit: ${last.reason ?? "terminated"}, code ${last.exitCode}${last.finishedAt ? ` at ${new Date(last.finishedAt).toISOString()}` : ""}` : "";
  if (rt.ready) {
    return restarts > 0
      ? { type: SandboxConditionType.RuntimeHealthy, status: "True", reason: "RuntimeRecovered", message: `${RUNTIME_CONTAINER} ready after ${restarts} restart${restarts === 1 ? "" : "s"}${lastExit}` }
      : { type: SandboxConditionType.RuntimeHealthy, status: "True", reason: "RuntimeReady", message: "" };
  }
  if (restarts > 0 || last) {
    const waiting = rt.state?.waiting?.reason ? ` (${rt.state.waiting.reason})` : "";
    return { type: SandboxConditionType.RuntimeHealthy, status: "False", reason: "RuntimeRestarting", message: `${RUNTIME_CONTAINER} is being restarted${waiting}: its liveness probe failed or it exited, ${restarts} restart${restarts === 1 ? "" : "s"}${lastExit}` };
  }
  return { type: SandboxConditionType.RuntimeHealthy, status: "False", reason: "RuntimeNotReady", message: `${RUNTIME_CONTAINER} is not ready yet` };
}

export interface SandboxStatus {
  observedGeneration?: number;
  phase: SandboxPhase;
  message: string;
  conditions: Condition[];
  podInfo: { podIP?: string; nodeName?: string; podUID?: string };
  sandboxIp?: string;
  nodeName?: string;
}

/** The Sandbox `.status` for a state, carrying over lastTransitionTime of unchanged conditions. */
export function sandboxStatus(prev: SandboxStatus | undefined, s: SandboxState, f: SandboxFacts, generation: number | undefined, now: string): SandboxStatus {
  let conditions = setCondition(prev?.conditions, { type: SandboxConditionType.Ready, status: s.ready ? "True" : "False", reason: s.reason, message: s.message, observedGeneration: generation }, now);
  if (f.paused) {
    const reason = s.crPhase !== "Paused" ? PausedReason.Pending : f.pauseStrategy === "Stop" ? PausedReason.StopPauseSucceed : PausedReason.FreezePauseSucceed;
    conditions = setCondition(conditions, { type: SandboxConditionType.SandboxPaused, status: s.crPhase === "Paused" ? "True" : "False", reason, message: "", observedGeneration: generation }, now);
  } else {
    conditions = conditions.filter((c) => c.type !== SandboxConditionType.SandboxPaused);
  }
  const pod = f.pod;
  const runtime = runtimeHealth(pod);
  conditions = runtime ? setCondition(conditions, { ...runtime, observedGeneration: generation }, now) : conditions.filter((c) => c.type !== SandboxConditionType.RuntimeHealthy);
  return {
    observedGeneration: generation,
    phase: s.crPhase,
    message: s.message,
    conditions,
    podInfo: { podIP: pod?.status?.podIP, nodeName: pod?.spec?.nodeName, podUID: pod?.metadata?.uid },
    sandboxIp: pod?.status?.podIP,
    nodeName: pod?.spec?.nodeName,
  };
}
