// Inputs of the sandbox machine: client commands (already authorised by the shell), agent
// observations and acks, and the alarm.
import type { Refusal } from "../../schema/errors.ts";
import type { AckResult, Endpoint, Observation, PauseStrategy, TemplateSpec } from "../../schema/protocol/index.ts";
import type { Condition, HookConditionType, SandboxNote, SandboxSpec } from "./state.ts";
import type { Lifecycle } from "../../schema/api/hooks.ts";
import type { TransformRules } from "../../schema/egress/transforms.ts";

export type SandboxEvent =
  | { type: "create"; spec: SandboxSpec; timeoutS: number; generation: number; endpoint: Endpoint | null }
  | { type: "kill" }
  | { type: "setTimeout"; timeoutS: number }
  /** `strategy` undefined: the template's default. */
  | { type: "pause"; strategy?: PauseStrategy }
  /** E2B connect (= resume): extend-only on a running sandbox, resume with a floor if paused. */
  | { type: "connect"; timeoutS: number; memory?: boolean }
  /** Traffic for a paused sandbox (gateway): resumes only if lifecycle.autoResume allows it. */
  | { type: "wake" }
  | { type: "refresh"; durationS: number }
  /** E2B updateNetwork: replaces the egress rules (an omitted list clears it) of a running sandbox. */
  | { type: "updateNetwork"; allowOut?: string[]; denyOut?: string[]; rules?: TransformRules; allowInternetAccess: boolean | null }
  /**
   * Compensation: the create this instance ran did not complete (ClusterDO did not take it, no
   * ack in time, the agent failed it, it did not become ready). The sandbox is killed, so ClusterDO
   * and the agent drop whatever they took; nothing to do if it is gone or already terminating.
   */
  | { type: "abandon" }
  /**
   * An update ops run (Recreate): run the sandbox from `template` (a new revision) on the same
   * files; a paused one stays paused. `attempt` > the last one retries a failed upgrade.
   * `restoreFs` (CheckpointRestore): the files are first put back to that snapshot's; `holder`,
   * the run holding that snapshot (woken when the restore is no longer owed).
   */
  | { type: "upgrade"; template: TemplateSpec; attempt: number; restoreFs?: string; holder?: string; by?: string }
  /** E2B createSnapshot (and fork): the agent takes snapshot `snapshotId` of a running or paused
   * sandbox with the next generation, which leaves its state as it was. */
  | { type: "snapshot"; snapshotId: string }
  | { type: "observe"; obs: Observation }
  | { type: "ack"; generation: number; result: AckResult; message?: string }
  /** `pauseRefused`: the team quota refused the auto-pause this timeout would start. Over the
   * limit (`quota_exceeded`) the sandbox is killed as a timeout without auto-pause is; a quota that
   * cannot answer defers the pause (machine.ts `TIMEOUT_PAUSE_DEFER_MS`). */
  | { type: "alarm"; pauseRefused?: Refusal }
  /** A lifecycle hook ran (hooks/run-hook.ts): its condition, replacing the last run's. */
  | { type: "hook"; condition: Omit<Condition, "lastTransitionTime"> & { type: HookConditionType } }
  /** Steps another object took on it (an update ops run's): kept on its event list, whatever its
   * phase (a failed upgrade's step is recorded on the failed sandbox). */
  | { type: "record"; notes: SandboxNote[] }
  /** Its own lifecycle hooks replaced (`{}`: none). */
  | { type: "hooks"; hooks: Lifecycle };
