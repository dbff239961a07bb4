// The Commit lifecycle (upstream `commit_types.go`, gate `Commit`), as a pure function of what the
// controller saw: the Commit, the target pod, the commit Job and that Job's pod. The shell
// (`commit-controller.ts`) gathers those, applies the decision and calls again on the next change
// or after `requeueAfterMs`. Every way a Commit can end says why in a condition:
//   PodNotFound / ContainerNotFound      the target is missing        (CommitContainer=False)
//   NotASandbox / PlatformContainer      the target is not a tenant's container (CommitContainer=False)
//   PlatformImage                        the image names one the platform runs (CommitContainer=False)
//   JobCreateFailed                      the API server refused the Job (CommitContainer=False)
//   ExitCodeNotVisible                   the Job ended, its container's exit code cannot be read
//   CommitFailed / Timeout / NoDigest    the job ran and did not push  (PushCommittedImage=False)
//   Pushed                               with the image digest        (PushCommittedImage=True)
import { clipText } from "../../../../schema/api/limits.ts";
import { setCondition, type Condition } from "../../../../schema/crd/conditions.ts";
import { durationMs } from "../../../../schema/crd/duration.ts";
import { INJECTION_COMPONENTS } from "../../../../schema/crd/injection.ts";
import { RESERVED_CONTAINERS } from "../traffic-pod.ts";

/** The commit Job's deadline when the Commit sets none (`timeoutSeconds` 0 or absent): a commit
 * that hangs (a registry that never answers) must not hold a root pod with the node's containerd
 * socket for ever (s23 F14). */
export const DEFAULT_COMMIT_TIMEOUT_S = 3600;
/** The containers the platform puts in sandbox pods: never committed. `nerdctl commit` writes the
 * image into the node's containerd (`k8s.io`), where a tenant's changes to the platform's own
 * code would sit under a name the platform trusts (review 25 H3). */
export const PLATFORM_CONTAINERS: readonly string[] = [...new Set([...INJECTION_COMPONENTS, ...RESERVED_CONTAINERS])];

export type CommitPhase = "Pending" | "Running" | "Succeeded" | "Failed";

export interface CommitSpec {
  podName: string;
  containerName?: string;
  image: string;
  squashLayer?: number;
  timeoutSeconds?: number;
  ttl?: string;
  registryAuth?: { secrets?: string[] };
}

export interface CommitStatus {
  observedGeneration?: number;
  phase?: CommitPhase;
  message?: string;
  commitID?: string;
  startTime?: string;
  completionTime?: string;
  conditions?: Condition[];
}

/** What the controller saw of the target pod. */
export interface TargetPod {
  nodeName?: string;
  /** The containers' runtime ids (`containerd://<id>`) by name, those that have started. */
  containerIds: Record<string, string | undefined>;
  /** Container names in spec order (the first is the default target). */
  containers: string[];
  /** The pod is a sandbox's (the agent made it: label `created-by=sandbox`). */
  sandbox: boolean;
}

export interface CommitJob {
  /** Job conditions of status True: `Complete`, `Failed` (with the reason, e.g. DeadlineExceeded). */
  complete: boolean;
  failed?: { reason?: string; message?: string };
  /** When the job controller marked it finished (ms), for the exit code's grace period. */
  finishedAt?: number;
}

/** The commit container's end, from the Job's pod (absent: not visible). */
export interface CommitExit {
  exitCode: number;
  /** Its termination message: the pushed digest on success, the error otherwise. */
  message: string;
}

export interface CommitInputs {
  name: string;
  generation: number;
  spec: CommitSpec;
  status: CommitStatus;
  gate: boolean;
  /** null: the pod does not exist. */
  pod: TargetPod | null;
  /** null: no job yet. */
  job: CommitJob | null;
  exit: CommitExit | null;
  now: number;
  /** Every image the platform runs (the runtime's, the interpreter's, the injection config's, the
   * commit Job's): a Commit may push to none of their repositories (imageRepository). */
  platformImages: readonly string[];
}

export interface CommitEvent {
  type: "Normal" | "Warning";
  reason: string;
  message: string;
}

export interface CommitDecision {
  /** The status to write (only when it differs from the current one). */
  status?: CommitStatus;
  /** Create the commit Job for this container on this node. */
  createJob?: { container: string; containerId: string; nodeName: string };
  /** The Commit's ttl is over: delete it and its Job. */
  delete?: true;
  event?: CommitEvent;
  requeueAfterMs?: number;
}

/** How long a finished Job's container may keep its exit code out of sight before the Commit fails. */
export const EXIT_CODE_GRACE_MS = 60_000;
/** How often a Commit waiting on something the controller does not watch is looked at again. */
export const POLL_MS = 5_000;

const DIGEST = /\bsha256:[0-9a-f]{64}\b/;
const TERMINAL = new Set<CommitPhase>(["Succeeded", "Failed"]);

export function decideCommit(i: CommitInputs): CommitDecision {
  const iso = new Date(i.now).toISOString();
  const s = i.status;
  if (s.phase && TERMINAL.has(s.phase)) return afterEnd(i);

  const set = (phase: CommitPhase, cond: Omit<Condition, "lastTransitionTime">, extra: Partial<CommitStatus> = {}): CommitStatus => {
    const conditions = withCondition(s.conditions, cond, iso, i.generation);
    const terminal = TERMINAL.has(phase);
    return {
      ...s,
      observedGeneration: i.generation,
      phase,
      message: cond.message,
      conditions,
      ...(terminal && !s.completionTime ? { completionTime: iso } : {}),
      ...extra,
    };
  };
  const fail = (type: string, reason: string, message: string): CommitDecision => ({
    status: set("Failed", { type, status: "False", reason, message }),
    event: { type: "Warning", reason, message },
  });

  if (!i.gate) {
    return changed(s, set("Pending", { type: "CommitContainer", status: "False", reason: "FeatureGateDisabled", message: "the Commit feature gate is off on this agent (--feature-gates Commit=true)" }));
  }

  if (!i.job) {
    // Created by an earlier pass (the status says so) and gone before it ended: not made again,
    // since a second commit of a container that kept running is another image.
    if (s.phase === "Running") return fail("CommitContainer", "JobNotFound", `the commit job was deleted before it finished`);
    const repo = imageRepository(i.spec.image);
    const platform = i.platformImages.find((x) => imageRepository(x) === repo);
    if (platform) return fail("CommitContainer", "PlatformImage", `image ${JSON.stringify(i.spec.image)} is in the repository of ${JSON.stringify(platform)}, an image the platform runs: a commit would put the container under that name in the node's image store`);
    if (!i.pod) return fail("CommitContainer", "PodNotFound", `target pod ${i.spec.podName} not found`);
    if (!i.pod.sandbox) return fail("CommitContainer", "NotASandbox", `pod ${i.spec.podName} is not a sandbox's (no label created-by=sandbox): only sandboxes' containers are committed`);
    const container = i.spec.containerName || i.pod.containers[0];
    if (!container || !i.pod.containers.includes(container)) {
      return fail("CommitContainer", "ContainerNotFound", `pod ${i.spec.podName} has no container ${JSON.stringify(i.spec.containerName ?? "")}`);
    }
    if (PLATFORM_CONTAINERS.includes(container)) return fail("CommitContainer", "PlatformContainer", `container ${container} of pod ${i.spec.podName} is the platform's: only the template's containers are committed`);
    const containerId = i.pod.containerIds[container];
    if (!containerId || !i.pod.nodeName) {
      const d = changed(s, set("Pending", { type: "CommitContainer", status: "False", reason: "ContainerNotRunning", message: `container ${container} of pod ${i.spec.podName} has not started` }));
      return { ...d, requeueAfterMs: POLL_MS };
    }
    return { createJob: { container, containerId, nodeName: i.pod.nodeName } };
  }

  if (i.job.failed) {
    const timeout = i.job.failed.reason === "DeadlineExceeded";
    const detail = i.exit?.message.trim() || i.job.failed.message || i.job.failed.reason || "the commit job failed";
    return fail("PushCommittedImage", timeout ? "Timeout" : "CommitFailed", timeout ? `the commit did not finish within ${commitTimeoutS(i.spec)}s` : clip(detail));
  }
  if (i.job.complete) {
    if (!i.exit) {
      const since = i.job.finishedAt ?? i.now;
      if (i.now - since >= EXIT_CODE_GRACE_MS) return fail("PushCommittedImage", "ExitCodeNotVisible", "the commit job finished but its container's exit code is not visible (its pod is gone)");
      const d = changed(s, set("Running", { type: "PushCommittedImage", status: "Unknown", reason: "ExitCodeNotVisible", message: "the commit job finished; waiting for its container's exit code" }));
      return { ...d, requeueAfterMs: POLL_MS };
    }
    if (i.exit.exitCode !== 0) return fail("PushCommittedImage", "CommitFailed", clip(`exit code ${i.exit.exitCode}: ${i.exit.message.trim()}`));
    const digest = DIGEST.exec(i.exit.message)?.[0];
    if (!digest) return fail("PushCommittedImage", "NoDigest", "the commit job succeeded without reporting the pushed digest");
    const message = `pushed ${i.spec.image}@${digest}`;
    return {
      status: set("Succeeded", { type: "PushCommittedImage", status: "True", reason: "Pushed", message }, { commitID: digest }),
      event: { type: "Normal", reason: "Pushed", message },
    };
  }
  // Running: the job is still at work; the Job informer brings its end.
  return { requeueAfterMs: POLL_MS };
}

/** The status once the Job exists (the shell calls this after creating it). */
export function jobCreated(i: Pick<CommitInputs, "status" | "generation" | "now" | "spec">, job: string, node: string): CommitDecision {
  const iso = new Date(i.now).toISOString();
  const message = `commit job ${job} created on node ${node}`;
  const cond = { type: "CommitContainer", status: "Unknown" as const, reason: "JobCreated", message };
  return {
    status: { ...i.status, observedGeneration: i.generation, phase: "Running", message, startTime: i.status.startTime ?? iso, conditions: withCondition(i.status.conditions, cond, iso, i.generation) },
    event: { type: "Normal", reason: "JobCreated", message },
    requeueAfterMs: POLL_MS,
  };
}

/** The API server refused the Job. */
export function jobRefused(i: Pick<CommitInputs, "status" | "generation" | "now">, why: string): CommitDecision {
  const iso = new Date(i.now).toISOString();
  const message = clip(`creating the commit job failed: ${why}`);
  const cond = { type: "CommitContainer", status: "False" as const, reason: "JobCreateFailed", message };
  return {
    status: { ...i.status, observedGeneration: i.generation, phase: "Failed", message, completionTime: iso, conditions: withCondition(i.status.conditions, cond, iso, i.generation) },
    event: { type: "Warning", reason: "JobCreateFailed", message },
  };
}

/** The commit Job's deadline in seconds: the Commit's, or DEFAULT_COMMIT_TIMEOUT_S. */
export function commitTimeoutS(spec: Pick<CommitSpec, "timeoutSeconds">): number {
  return spec.timeoutSeconds || DEFAULT_COMMIT_TIMEOUT_S;
}

/**
 * An image reference's repository as containerd names it (registry/path, no tag or digest,
 * Docker Hub's defaults filled in, lower case), so `sandbox-agent:0.1.1`,
 * `ghcr.io/kruise-edge/sandbox-agent@sha256:…` and the running `…:0.1.0` compare equal: the
 * whole repository is refused, not only the tag running now, since a tag the operator will roll
 * out next would be found already in the node's store (IfNotPresent) and run as the platform.
 */
export function imageRepository(ref: string): string {
  let r = ref.trim().toLowerCase().split("@")[0]!;
  const colon = r.lastIndexOf(":");
  if (colon > r.lastIndexOf("/")) r = r.slice(0, colon);
  const parts = r.split("/");
  const registry = parts.length > 1 && (parts[0]!.includes(".") || parts[0]!.includes(":") || parts[0] === "localhost") ? parts.shift()! : "docker.io";
  if (registry === "docker.io" && parts.length === 1) parts.unshift("library");
  return `${registry === "index.docker.io" ? "docker.io" : registry}/${parts.join("/")}`;
}

function afterEnd(i: CommitInputs): CommitDecision {
  if (!i.spec.ttl) return {};
  const ttl = durationMs(i.spec.ttl, 0);
  const done = i.status.completionTime ? Date.parse(i.status.completionTime) : i.now;
  const left = done + ttl - i.now;
  return left <= 0 ? { delete: true } : { requeueAfterMs: left };
}

function withCondition(list: Condition[] | undefined, next: Omit<Condition, "lastTransitionTime">, now: string, generation: number): Condition[] {
  return setCondition(list, { ...next, observedGeneration: generation }, now);
}

/** Only a status that differs is written (so a waiting Commit costs no write per look). */
function changed(old: CommitStatus, next: CommitStatus): CommitDecision {
  const same = old.phase === next.phase && old.message === next.message && JSON.stringify(old.conditions?.map(strip)) === JSON.stringify(next.conditions?.map(strip));
  return same ? {} : { status: next };
}
const strip = ({ lastTransitionTime: _t, ...c }: Condition) => c;

const clip = (s: string) => clipText(s, 1024);
