// What the agent does with a Checkpoint that its checkpoint engine (the node-level component
// that copies a container's files; upstream's external controller) reported on: pure, beside the
// shell in checkpoint-controller.ts.
//   Succeeded, healthy                  nothing
//   Succeeded, `Healthy=False`          rebuilt: phase back to Creating for the engine, at most once
//                                       a minute, up to 6 times; then Failed with the last reason
//   Failed without status.checkpointId  kept as it is: the engine's message says why there is no
//                                       remote copy, and nothing may overwrite it
import type { Condition } from "../../../../schema/crd/conditions.ts";
import { setCondition } from "../../../../schema/crd/conditions.ts";
import { clipText } from "../../../../schema/api/limits.ts";

export type CheckpointPhase = "Pending" | "Creating" | "Succeeded" | "Failed" | "Terminating";

export interface CheckpointStatus {
  observedGeneration?: number;
  phase?: CheckpointPhase;
  message?: string;
  checkpointId?: string;
  conditions?: Condition[];
}

export const REBUILD_EVERY_MS = 60_000;
export const MAX_REBUILDS = 6;
/** Annotations the agent keeps on a Checkpoint: rebuilds done, and when the last one started. */
export const REBUILDS_ANNOTATION = "agents.kruise.io/checkpoint-rebuilds";
export const REBUILT_AT_ANNOTATION = "agents.kruise.io/checkpoint-rebuilt-at";

export interface CheckpointInputs {
  status: CheckpointStatus;
  rebuilds: number;
  /** ms of the last rebuild (absent: none yet). */
  rebuiltAt?: number;
  generation: number;
  now: number;
}

export interface CheckpointDecision {
  status?: CheckpointStatus;
  annotations?: Record<string, string>;
  event?: { type: "Normal" | "Warning"; reason: string; message: string };
  requeueAfterMs?: number;
}

const unhealthy = (s: CheckpointStatus) => s.conditions?.find((c) => c.type === "Healthy" && c.status === "False");

export function decideCheckpoint(i: CheckpointInputs): CheckpointDecision {
  const s = i.status;
  if (s.phase !== "Succeeded") return {};
  const bad = unhealthy(s);
  if (!bad) return {};
  const iso = new Date(i.now).toISOString();
  const why = bad.message || bad.reason || "unhealthy";
  if (i.rebuilds >= MAX_REBUILDS) {
    const message = clipText(`unhealthy after ${MAX_REBUILDS} rebuilds: ${why}`, 1024);
    return {
      status: { ...s, phase: "Failed", message, observedGeneration: i.generation, conditions: setCondition(s.conditions, { type: "Rebuilding", status: "False", reason: "RebuildLimitReached", message, observedGeneration: i.generation }, iso) },
      event: { type: "Warning", reason: "CheckpointFailed", message },
    };
  }
  const wait = i.rebuiltAt === undefined ? 0 : i.rebuiltAt + REBUILD_EVERY_MS - i.now;
  if (wait > 0) return { requeueAfterMs: wait };
  const n = i.rebuilds + 1;
  const message = clipText(`rebuild ${n} of ${MAX_REBUILDS}: ${why}`, 1024);
  return {
    // Back to the engine: Creating, with the old id kept until it reports a new one.
    status: { ...s, phase: "Creating", message, observedGeneration: i.generation, conditions: setCondition(s.conditions, { type: "Rebuilding", status: "True", reason: "Unhealthy", message, observedGeneration: i.generation }, iso) },
    annotations: { [REBUILDS_ANNOTATION]: String(n), [REBUILT_AT_ANNOTATION]: iso },
    event: { type: "Warning", reason: "CheckpointRebuilding", message },
    requeueAfterMs: REBUILD_EVERY_MS,
  };
}
