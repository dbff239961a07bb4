// The PoolDO's RPC surface (what the create route, the admin API and ClusterDO call). Every
// method resolves to a typed result; none throws across the RPC boundary.
import type { Refusal } from "../../schema/errors.ts";
import type { AutoscalerSpec } from "../../schema/api/autoscaler.ts";
import type { TemplateRecord, TemplateSpec as SandboxSetSpec } from "../../schema/api/template.ts";
import type { Endpoint, SandboxId, TemplateSpec } from "../../schema/protocol/index.ts";
import type { PoolFailure } from "./machine.ts";

/**
 * A claimed sandbox, now the caller's: it must hand it to `sandboxHandle(env, sandboxId).create(...)`,
 * which sends an intent with owner `{kind:"sandbox"}` and a generation above `generation`.
 * - `state: "available"`: a warm member, running and ready at `endpoint`;
 * - `state: "creating"`: a warm member still starting (its Running observation goes to the
 *   sandbox's group once it owns the id);
 * - `state: "new"` (`warm: false`): no stock, a freshly minted id nobody has created yet; the
 *   group's intent creates it (generation 0 here, so the first intent may use 1).
 */
/**
 * What `configure` takes: the stored template (SandboxSet spec + revision, as the store returns
 * it), plus the cluster its members run on (default `local`).
 */
export type PoolConfig = Pick<TemplateRecord, "teamId" | "templateId" | "revision" | "spec"> & { cluster?: string; teamName?: string };

export interface Claimed {
  ok: true;
  sandboxId: SandboxId;
  cluster: string;
  revision: string;
  warm: boolean;
  state: "available" | "creating" | "new";
  /** Generation of the last intent the pool sent for this member. */
  generation: number;
  endpoint: Endpoint | null;
  /** The spec to create from (template, pause strategy, network, env of the SandboxSet). */
  template: TemplateSpec;
  pauseStrategy: SandboxSetSpec["pauseStrategy"];
  /** The template's `env`, which create-time envVars override. */
  envVars: Record<string, string>;
}
export type ClaimResult = Claimed | { ok: false; error: Refusal };

export interface PoolStatus {
  configured: boolean;
  name: string | null;
  replicas: number;
  revision: string | null;
  /** Unclaimed members by state, and how many of them run the current revision. */
  available: number;
  creating: number;
  updatedAvailable: number;
  updated: number;
  /** The rolling update (SandboxSet `.status` names): done when `currentRevision` equals
   * `updateRevision` and `updatedAvailableReplicas` equals `replicas`. */
  updateRevision: string | null;
  currentRevision: string | null;
  updatedReplicas: number;
  updatedAvailableReplicas: number;
  /** `spec.updateStrategy.maxUnavailable` resolved against `replicas`. */
  maxUnavailable: number;
  /** Lifetime counters of this pool object. */
  claimed: number;
  createdOnDemand: number;
  /** Set while the cluster refuses the current revision's members (machine.ts `failing`): the
   * last refusal, how many in a row, and when the next member is tried (ms). */
  failing: PoolFailure | null;
}

export type ConfigureResult = { ok: true; status: PoolStatus } | { ok: false; error: Refusal };
export type ObserveResult = { ok: true; applied: number } | { ok: false; error: Refusal };

/** A pool's PoolAutoscaler as the admin API shows it (the CRD's `.status` names, plus the last
 * decision and the latest events). */
export interface AutoscalerStatus {
  configured: boolean;
  spec: AutoscalerSpec | null;
  suspended: boolean;
  currentReplicas: number;
  desiredReplicas: number;
  lastScaleTime: string | null;
  currentCapacity: { available: number };
  appliedCronPolicies: { name: string; lastScheduleTime: string }[];
  lastDecision: { time: string; reason: string; message: string; currentReplicas: number; desiredReplicas: number } | null;
  conditions: { type: string; status: "True" | "False"; reason: string; message: string }[];
  events: { time: string; type: string; reason: string; message: string }[];
}
export type AutoscalerResult = { ok: true; status: AutoscalerStatus } | { ok: false; error: Refusal };
