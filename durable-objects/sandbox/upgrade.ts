// What an update ops run (durable-objects/ops/) asks a sandbox group, and what it is answered:
// the candidates' facts for selection, and each upgrade's progress.
import type { TemplateSpec } from "../../schema/protocol/index.ts";
import type { Phase, SandboxState, SandboxUpgrade } from "./state.ts";

/** A claimed sandbox as an ops run selects it. */
export interface OpsCandidate {
  id: string;
  templateId: string;
  /** The cluster it runs on (whose driver does the Recreate). */
  cluster: string;
  labels: Record<string, string>;
  phase: Phase;
  /** The template revision it runs. */
  revision: string;
  /** The run whose upgrade of it is under way (heldBy): another run skips it. */
  upgradingBy?: string;
}

export interface UpgradeRequest {
  id: string;
  /** The ops run's team: a sandbox of another team is answered as gone. */
  teamId: string;
  template: TemplateSpec;
  attempt: number;
  /** CheckpointRestore: the member's snapshot, whose files it is recreated on. */
  restoreFs?: string;
  /** The run's name: the group wakes it once that restore is no longer owed (it may hold the
   * snapshot past its own need, until the sandbox's resume restores it). */
  holder?: string;
  /** The run asking (its name): while its upgrade is under way another run's upgrade of the
   * sandbox is not applied (heldBy), so two runs selecting one sandbox with different targets do
   * not take turns re-sending theirs. */
  by?: string;
  /** The run's step asking (when traced): the upgrade's intent and the agent's work join its trace. */
  traceparent?: string;
}

/** `waiting`: not started yet (the sandbox is pausing, resuming or starting); asked again later. */
/** `held`: another run's upgrade of it is under way: left to that run (`message`). */
export type UpgradeStatus = "waiting" | "updating" | "succeeded" | "failed" | "gone" | "held";
export interface UpgradeOutcome {
  status: UpgradeStatus;
  message?: string;
  /** Succeeded paused, its snapshot still to be restored (when it resumes): keep the snapshot. */
  restorePending?: boolean;
  /** The snapshot that restore names (an earlier run's, when this upgrade carried it forward). */
  restoreFs?: string;
}

export function opsCandidate(s: SandboxState): OpsCandidate {
  const by = upgradeHolder(s);
  return { id: s.spec.id, templateId: s.spec.templateId, cluster: s.spec.cluster, labels: s.spec.labels, phase: s.phase, revision: s.spec.template.revision, ...(by ? { upgradingBy: by } : {}) };
}

/** A member's line when another run holds its sandbox. */
export const heldMessage = (run: string, detail = "its upgrade of it is under way") => `left alone: SandboxUpdateOps "${run}" holds it (${detail})`;

/**
 * The run holding `s` against run `by`: the one whose upgrade of it is under way (OpenKruise skips
 * a sandbox labelled by another active ops the same way). First come holds it; once that upgrade
 * is done, or has failed, another run may upgrade it. A failed upgrade does not hold: its run may
 * be failed for good or deleted, and nothing would ever release the sandbox (review N4).
 */
export function heldBy(s: SandboxState, by: string | undefined): string | undefined {
  const holder = upgradeHolder(s);
  return holder && by && holder !== by ? holder : undefined;
}

/** The run whose upgrade of `s` is under way (not done, not failed), if any (heldBy). */
function upgradeHolder(s: SandboxState): string | undefined {
  return s.upgrade && !s.upgrade.done && s.phase !== "Failed" ? s.upgrade.by : undefined;
}

/** Where the upgrade to (`revision`, `attempt`) of `s` by run `by` stands. */
export function upgradeOutcome(s: SandboxState | null, revision: string, attempt: number, by?: string): UpgradeOutcome {
  if (!s || s.phase === "Terminating") return { status: "gone" };
  const holder = heldBy(s, by);
  if (holder) return { status: "held", message: heldMessage(holder, `its upgrade to revision ${s.upgrade!.revision} is under way`) };
  const u = s.upgrade;
  if (!u || u.revision !== revision || u.attempt < attempt) return { status: "waiting" };
  // A paused sandbox's restore: not known until its first report (pending keeps the snapshot).
  if (u.done && u.restore === "unreported") return { status: "updating" };
  if (u.done) return u.restore === "pending" ? { status: "succeeded", restorePending: true, restoreFs: u.restoreFs } : { status: "succeeded" };
  if (s.phase === "Failed") {
    const c = s.conditions.find((x) => x.type === "Upgrading") ?? s.conditions.find((x) => x.type === "Ready");
    return { status: "failed", message: c?.message ?? c?.reason };
  }
  return { status: "updating" };
}

/** Whether upgrade `u` still owes the restore of its snapshot: under way (or failed, to be
 * retried), or done with the restore waiting for the sandbox's resume (or not reported yet). */
export function restoreOwed(u: SandboxUpgrade): boolean {
  return Boolean(u.restoreFs) && (!u.done || u.restore === "pending" || u.restore === "unreported");
}

/** Whether sandbox `s` may still need snapshot `snapshotId` restored: its upgrade owes that restore
 * (its own, or one carried forward from an earlier upgrade), or replaced a restore of it and is not
 * done yet (the agent's pending mark may name it until it applies the new one). Whoever holds the
 * snapshot (UpdateOpsDO's left snapshots) frees it only once this is false. */
export function restoreNeeds(s: SandboxState | null, snapshotId: string): boolean {
  const u = s?.upgrade;
  if (!s || !u || s.phase === "Terminating") return false;
  if (u.replaces === snapshotId) return !u.done;
  return u.restoreFs === snapshotId && restoreOwed(u);
}

/** The holders to wake: each run holding a snapshot `before` needed restored and `after` does not. */
export function restoresSettled(before: SandboxState | null, after: SandboxState | null): { snapshotId: string; holder: string }[] {
  return Object.entries(before?.upgrade?.holders ?? {})
    .filter(([snapshotId]) => restoreNeeds(before, snapshotId) && !restoreNeeds(after, snapshotId))
    .map(([snapshotId, holder]) => ({ snapshotId, holder }));
}
