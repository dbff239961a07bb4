// What an update ops run (durable-objects/ops/) asks a sandbox group, and what it is answered:
// the candidates' facts for selection, and each upgrade's progress.
import type { TemplateSpec } from "../../schema/protocol/index.ts";
import type { Phase, SandboxState } from "./state.ts";

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
}

export interface UpgradeRequest {
  id: string;
  /** The ops run's team: a sandbox of another team is answered as gone. */
  teamId: string;
  template: TemplateSpec;
  attempt: number;
  /** CheckpointRestore: the member's snapshot, whose files it is recreated on. */
  restoreFs?: string;
  /** The run's step asking (when traced): the upgrade's intent and the agent's work join its trace. */
  traceparent?: string;
}

/** `waiting`: not started yet (the sandbox is pausing, resuming or starting); asked again later. */
export type UpgradeStatus = "waiting" | "updating" | "succeeded" | "failed" | "gone";
export interface UpgradeOutcome {
  status: UpgradeStatus;
  message?: string;
  /** Succeeded paused, its snapshot still to be restored (when it resumes): keep the snapshot. */
  restorePending?: boolean;
}

export function opsCandidate(s: SandboxState): OpsCandidate {
  return { id: s.spec.id, templateId: s.spec.templateId, cluster: s.spec.cluster, labels: s.spec.labels, phase: s.phase, revision: s.spec.template.revision };
}

/** Where the upgrade to (`revision`, `attempt`) of `s` stands. */
export function upgradeOutcome(s: SandboxState | null, revision: string, attempt: number): UpgradeOutcome {
  if (!s || s.phase === "Terminating") return { status: "gone" };
  const u = s.upgrade;
  if (!u || u.revision !== revision || u.attempt < attempt) return { status: "waiting" };
  // A paused sandbox's restore: not known until its first report (pending keeps the snapshot).
  if (u.done && u.restore === "unreported") return { status: "updating" };
  if (u.done) return u.restore === "pending" ? { status: "succeeded", restorePending: true } : { status: "succeeded" };
  if (s.phase === "Failed") {
    const c = s.conditions.find((x) => x.type === "Upgrading") ?? s.conditions.find((x) => x.type === "Ready");
    return { status: "failed", message: c?.message ?? c?.reason };
  }
  return { status: "updating" };
}
