import { z } from "zod";
import { TemplateSpec, TemplateId } from "../api/template.ts";
import { TeamName } from "../api/team.ts";
import { TeamQuotaUpdate } from "../api/quota.ts";
import { boundedRecord } from "../api/sandbox.ts";
import {
  MAX_CRD_FRAME_ITEMS,
  MAX_ENV_NAME_LENGTH,
  MAX_ENV_VALUE_LENGTH,
  MAX_ENV_VARS,
  MAX_MESSAGE_LENGTH,
  MAX_METADATA_ENTRIES,
  MAX_METADATA_KEY_BYTES,
  MAX_METADATA_VALUE_BYTES,
  MAX_NAME_LENGTH,
} from "../api/limits.ts";
import { SandboxIdSchema } from "./ids.ts";
import { InplaceUpdateSchema } from "./intent.ts";
import { AutoscalerSpec } from "../api/autoscaler.ts";
import { AutoPausePolicy } from "../api/auto-pause.ts";
import { Lifecycle } from "../api/hooks.ts";
import { UpdateOpsName, UpdateOpsSpec } from "../api/update-ops.ts";
import { TrafficPolicyName, TrafficPolicySpec } from "../api/traffic-policy.ts";
import { MAX_SECURITY_PROFILES, SecurityProfileName, SecurityProfileSpec } from "../api/security-profile.ts";

/*
 * The cluster's custom resources over the agent's session (kubernetes driver): the platform team
 * edits SandboxSets, SandboxClaims and Sandboxes with kubectl, the agent forwards them, the edge
 * (the authority) applies them and answers each item with a `replies` entry carrying its `id`.
 *
 *   agent → edge  sandboxsets   SandboxSet upserts `{namespace, name, uid, generation, spec}`,
 *                               deletions, and after each (re)start the namespace's inventory
 *                               `{namespace, present}`: the template (and warm pool) `name` of
 *                               team = namespace
 *   agent → edge  requests      kubectl edits of a Sandbox (spec.paused, delete): pause, resume, kill
 *   agent → edge  claims        a SandboxClaim: take `replicas` sandboxes from the team's pool
 *   agent → edge  quotas        the team quota set on the namespace (annotations), `{}` when removed
 *   agent → edge  autoscalers   a PoolAutoscaler: upserts `{namespace, name, uid, generation, target,
 *                               spec}` set the autoscaler of the pool of SandboxSet `target`,
 *                               deletions remove it, `{…, status: true}` asks for its status (every
 *                               reply to these carries it: the admin API's GET), and after each
 *                               (re)start the namespace's inventory `{namespace, present}`
 *   agent → edge  securityprofileobjects  a SecurityProfile of the namespace (its team's) or a
 *                               GlobalSecurityProfile (`namespace` null), like trafficpolicyobjects;
 *                               answered with the sandboxes it selects
 *   agent → edge  trafficpolicyobjects  a TrafficPolicy (`namespace` its team's) or GlobalTrafficPolicy
 *                               (`namespace` null): upserts `{namespace, name, uid, generation, spec}`
 *                               set the edge's policy (the admin API's), deletions remove it,
 *                               `{…, status: true}` asks for its status; every reply to these carries
 *                               the live sandboxes it selects
 *   edge  → agent replies       one per item, by `id`
 *
 * The edge advertises these in `welcome.features`; an agent sends them only to an edge that does,
 * so either side may be older without breaking the session.
 *
 * Every list, map and string is bounded (schema/api/limits.ts) so a hostile or broken cluster object
 * cannot make an unbounded frame: a frame past a bound is a protocol error (`bad_frame`, 4400), and
 * the agent, which parses its own frames with these schemas, refuses such an item before sending.
 */

/** Features an edge may list in `welcome.features`. */
export const CRD_SYNC_FEATURES = ["sandboxsets", "requests", "claims", "quotas", "autoscalers", "updateops", "trafficpolicyobjects", "securityprofileobjects", "sandboxsetCpuShares"] as const;
/** Not a frame: this edge's TemplateSpec takes `restCpu` and `initCpu` in a `sandboxsets` item. An
 * older edge's strict schema refuses the whole item for them, so the agent sends them only where
 * this is listed. */
export const SANDBOXSET_CPU_SHARES_FEATURE = "sandboxsetCpuShares" satisfies CrdSyncFeature;
export type CrdSyncFeature = (typeof CRD_SYNC_FEATURES)[number];

/** E2B metadata key marking the sandboxes a SandboxClaim took (value: the claim's uid). Metadata
 * may not use the reserved `agents.kruise.io/` prefixes, hence the plain name. */
export const CLAIM_METADATA_KEY = "kruise-claim-uid";

/** Correlates an item with its reply; unique per agent session (the agent mints them). */
export const ItemIdSchema = z.string().min(1).max(64);

/** SandboxSets of one namespace an inventory may list (a team's templates). */
export const MAX_TEMPLATES_PER_NAMESPACE = 1000;

/** Object identity in the cluster: the namespace is the team's name. */
const ObjectRef = {
  id: ItemIdSchema,
  namespace: TeamName,
  name: TemplateId,
  /** metadata.uid: a SandboxSet deleted and re-created under the same name is a new object. */
  uid: z.string().min(1).max(MAX_NAME_LENGTH),
};

/** The items of one frame: at least one, at most MAX_CRD_FRAME_ITEMS. */
const items = <T extends z.ZodType>(item: T) => z.array(item).min(1).max(MAX_CRD_FRAME_ITEMS, `at most ${MAX_CRD_FRAME_ITEMS} items per frame`);

export const SandboxSetUpsertSchema = z.object({
  ...ObjectRef,
  /** metadata.generation: for one uid, an older generation never overwrites a newer one. */
  generation: z.int().nonnegative(),
  /** The template spec; its `cluster` is ignored (members run on the sending agent's cluster). */
  spec: TemplateSpec,
});
export const SandboxSetDeletionSchema = z.object({ ...ObjectRef, deleted: z.literal(true) });
/** Every SandboxSet the namespace holds now: the edge deletes those it got from this cluster that
 * are missing (deleted while the agent was down). Templates made otherwise are not touched. */
export const SandboxSetInventorySchema = z.object({ id: ItemIdSchema, namespace: TeamName, present: z.array(TemplateId).max(MAX_TEMPLATES_PER_NAMESPACE, `at most ${MAX_TEMPLATES_PER_NAMESPACE} SandboxSets per namespace`) });
export const SandboxSetItemSchema = z.union([SandboxSetDeletionSchema, SandboxSetInventorySchema, SandboxSetUpsertSchema]);
export type SandboxSetItem = z.infer<typeof SandboxSetItemSchema>;
export type SandboxSetItemInput = z.input<typeof SandboxSetItemSchema>;

export const SandboxSetsSchema = z.object({ type: z.literal("sandboxsets"), items: items(SandboxSetItemSchema) });

export const SandboxRequestItemSchema = z.object({
  id: ItemIdSchema,
  sandboxId: SandboxIdSchema,
  /** The namespace of the edited Sandbox object: the edge acts only when it is the sandbox's team
   * (any namespace can hold a Sandbox annotated with another team's sandbox id). */
  namespace: TeamName,
  /** `autoPause`: the Sandbox's probes/autoPausePolicy (kubectl) start the edge's probe; without
   * `autoPausePolicy` the Sandbox has none (removed, or one the agent cannot map): it stops. */
  action: z.enum(["pause", "resume", "kill", "autoPause", "lifecycle"]),
  autoPausePolicy: AutoPausePolicy.optional(),
  /** `lifecycle`: the Sandbox's own hooks (kubectl), replacing what it had; `{}` removes them. */
  lifecycle: Lifecycle.optional(),
  /** The agent's first look at a Sandbox made before it started, which has no policy (autoPause)
   * or no hooks (lifecycle): whatever the Sandbox had may have been removed while the agent was
   * down. The edge drops what it holds from the Sandbox (a probe a Sandbox started, not one an
   * E2B create's metadata did) and otherwise changes nothing. */
  resync: z.literal(true).optional(),
  /** The edge generation the Sandbox object showed when the user edited it: a request made
   * against an older generation than the edge's current one is answered `stale`. */
  generation: z.int().nonnegative(),
});
export type SandboxRequestItem = z.infer<typeof SandboxRequestItemSchema>;

export const RequestsSchema = z.object({ type: z.literal("requests"), items: items(SandboxRequestItemSchema) });

/** The claim's maps, bounded as an E2B create's envVars and metadata are (their names and keys
 * are checked by the create itself, as an item's refusal, not here). */
const ClaimEnvVars = boundedRecord(z.string().max(MAX_ENV_NAME_LENGTH), z.string().max(MAX_ENV_VALUE_LENGTH), MAX_ENV_VARS, "env vars");
const ClaimMetadata = (what: string) => boundedRecord(z.string().max(MAX_METADATA_KEY_BYTES), z.string().max(MAX_METADATA_VALUE_BYTES), MAX_METADATA_ENTRIES, what);

export const ClaimItemSchema = z.object({
  id: ItemIdSchema,
  namespace: TeamName,
  claim: z.object({ name: z.string().min(1).max(MAX_NAME_LENGTH), uid: z.string().min(1).max(MAX_NAME_LENGTH) }),
  /** The SandboxSet (template) of the namespace's team to claim from. */
  templateName: TemplateId,
  /** Sandboxes the claim wants in all; the edge counts those it already has for `claim.uid`, so a
   * repeated item never claims twice. */
  replicas: z.int().min(1).max(1000),
  envVars: ClaimEnvVars.default({}),
  labels: ClaimMetadata("labels").default({}),
  annotations: ClaimMetadata("annotations").default({}),
  /** E2B timeout of each claimed sandbox, seconds (absent: the edge's default). */
  timeoutS: z.int().positive().optional(),
  /** Create a member when the pool has none available (OpenKruise default true). */
  createOnNoStock: z.boolean().default(true),
  /** Bound on waiting for the cluster to take each sandbox. */
  waitReadyMs: z.int().positive().optional(),
  /** Change each claimed member in place (image, CPU), as E2B's image / cpu-limit extensions do. */
  inplaceUpdate: InplaceUpdateSchema.optional(),
});
export type ClaimItem = z.infer<typeof ClaimItemSchema>;
export type ClaimItemInput = z.input<typeof ClaimItemSchema>;

export const ClaimsSchema = z.object({ type: z.literal("claims"), items: items(ClaimItemSchema) });

/**
 * The team quota a platform team set on the team's Namespace (annotations `quota.agents.kruise.io/*`,
 * controllers/agent/kube-sync/namespace-quota-sync.ts), the admin API's `PUT /admin/teams/{team}/quota`
 * body: a limit left out takes the deployment's default, so `{}` (every annotation removed) returns
 * the team to the defaults.
 */
export const TeamQuotaItemSchema = z.object({ id: ItemIdSchema, namespace: TeamName, limits: TeamQuotaUpdate });
export type TeamQuotaItem = z.infer<typeof TeamQuotaItemSchema>;

export const QuotasSchema = z.object({ type: z.literal("quotas"), items: items(TeamQuotaItemSchema) });

const PoolAutoscalerRef = { ...ObjectRef, name: z.string().min(1).max(MAX_NAME_LENGTH) };
export const PoolAutoscalerUpsertSchema = z.object({
  ...PoolAutoscalerRef,
  /** metadata.generation: for one uid, an older generation never overwrites a newer one. */
  generation: z.int().nonnegative(),
  /** spec.scaleTargetRef.name: the SandboxSet (template of team = namespace) whose pool it sizes. */
  target: TemplateId,
  spec: AutoscalerSpec,
});
export const PoolAutoscalerDeletionSchema = z.object({ ...PoolAutoscalerRef, deleted: z.literal(true) });
export const PoolAutoscalerStatusQuerySchema = z.object({ ...PoolAutoscalerRef, status: z.literal(true) });
/** Every PoolAutoscaler the namespace holds now: the edge removes those it got from this cluster
 * that are missing (deleted while the agent was down). */
export const PoolAutoscalerInventorySchema = z.object({ id: ItemIdSchema, namespace: TeamName, present: z.array(z.string().min(1).max(MAX_NAME_LENGTH)).max(MAX_TEMPLATES_PER_NAMESPACE) });
export const PoolAutoscalerItemSchema = z.union([PoolAutoscalerDeletionSchema, PoolAutoscalerStatusQuerySchema, PoolAutoscalerInventorySchema, PoolAutoscalerUpsertSchema]);
export type PoolAutoscalerItem = z.infer<typeof PoolAutoscalerItemSchema>;
export type PoolAutoscalerItemInput = z.input<typeof PoolAutoscalerItemSchema>;
export const AutoscalersSchema = z.object({ type: z.literal("autoscalers"), items: items(PoolAutoscalerItemSchema) });

const Text = z.string().max(MAX_MESSAGE_LENGTH);
const Word = z.string().max(MAX_NAME_LENGTH);
const Replicas = z.int().nonnegative();
/** The autoscaler's status as the admin API's GET shows it (durable-objects/pool/rpc.ts), bounded. */
export const AutoscalerStatusReplySchema = z.object({
  suspended: z.boolean(),
  currentReplicas: Replicas,
  desiredReplicas: Replicas,
  lastScaleTime: Word.nullable(),
  currentCapacity: z.object({ available: Replicas }),
  appliedCronPolicies: z.array(z.object({ name: Word, lastScheduleTime: Word })).max(32),
  lastDecision: z.object({ time: Word, reason: Word, message: Text, currentReplicas: Replicas, desiredReplicas: Replicas }).nullable(),
  conditions: z.array(z.object({ type: Word, status: z.enum(["True", "False"]), reason: Word, message: Text })).max(8),
  events: z.array(z.object({ time: Word, type: Word, reason: Word, message: Text })).max(50),
});
export type AutoscalerStatusReply = z.infer<typeof AutoscalerStatusReplySchema>;

/*
 * agent → edge  updateops   a SandboxUpdateOps: upserts `{namespace, name, uid, generation, spec}`
 *                           start the run of team = namespace (or change `paused`/`maxUnavailable`
 *                           of the one running), `retry` (a new token) retries its failed sandboxes,
 *                           deletions remove it, `{…, status: true}` asks for its status, and the
 *                           namespace's inventory removes runs deleted while the agent was down.
 *                           Every answer carries the run's status (`updateOps`).
 */
const UpdateOpsRef = { id: ItemIdSchema, namespace: TeamName, name: UpdateOpsName, uid: z.string().min(1).max(MAX_NAME_LENGTH) };
export const UpdateOpsUpsertSchema = z.object({
  ...UpdateOpsRef,
  generation: z.int().nonnegative(),
  spec: UpdateOpsSpec,
  /** The object's retry annotation: a value the edge has not seen for this uid retries the failed. */
  retry: z.string().max(MAX_NAME_LENGTH).optional(),
});
export const UpdateOpsDeletionSchema = z.object({ ...UpdateOpsRef, deleted: z.literal(true) });
export const UpdateOpsStatusQuerySchema = z.object({ ...UpdateOpsRef, status: z.literal(true) });
export const UpdateOpsInventorySchema = z.object({ id: ItemIdSchema, namespace: TeamName, present: z.array(UpdateOpsName).max(MAX_TEMPLATES_PER_NAMESPACE) });
export const UpdateOpsItemSchema = z.union([UpdateOpsDeletionSchema, UpdateOpsStatusQuerySchema, UpdateOpsInventorySchema, UpdateOpsUpsertSchema]);
export type UpdateOpsItem = z.infer<typeof UpdateOpsItemSchema>;
export type UpdateOpsItemInput = z.input<typeof UpdateOpsItemSchema>;
export const UpdateOpsItemsSchema = z.object({ type: z.literal("updateops"), items: items(UpdateOpsItemSchema) });

/** The sandboxes a run's status lists (the CRD's per-sandbox lines). */
export const MAX_UPDATE_OPS_LINES = 1000;
/** A run's status as the admin API shows it (durable-objects/ops/update-ops-do.ts), bounded. */
export const UpdateOpsStatusReplySchema = z.object({
  phase: z.enum(["Pending", "Updating", "Completed", "Failed"]),
  replicas: z.int().nonnegative(),
  updatedReplicas: z.int().nonnegative(),
  failedReplicas: z.int().nonnegative(),
  updatingReplicas: z.int().nonnegative(),
  conditions: z.array(z.object({ type: Word, status: z.enum(["True", "False"]), reason: Word, message: Text.optional(), lastTransitionTime: z.number() })).max(8),
  sandboxes: z
    .array(z.object({ id: SandboxIdSchema, status: Word, from: Word, to: Word, paused: z.boolean(), attempt: z.int().nonnegative(), message: Text.optional() }))
    .max(MAX_UPDATE_OPS_LINES),
  events: z.array(z.object({ at: z.number(), type: z.enum(["Normal", "Warning"]), reason: Word, sandboxId: SandboxIdSchema.optional(), message: Text })).max(200),
});
export type UpdateOpsStatusReply = z.infer<typeof UpdateOpsStatusReplySchema>;
const TrafficPolicyRef = { id: ItemIdSchema, namespace: TeamName.nullable(), name: TrafficPolicyName, uid: z.string().min(1).max(MAX_NAME_LENGTH) };
export const TrafficPolicyUpsertSchema = z.object({ ...TrafficPolicyRef, generation: z.int().nonnegative(), spec: TrafficPolicySpec });
export const TrafficPolicyDeletionSchema = z.object({ ...TrafficPolicyRef, deleted: z.literal(true) });
export const TrafficPolicyStatusQuerySchema = z.object({ ...TrafficPolicyRef, status: z.literal(true) });
export const TrafficPolicyItemSchema = z.union([TrafficPolicyDeletionSchema, TrafficPolicyStatusQuerySchema, TrafficPolicyUpsertSchema]);
export type TrafficPolicyItem = z.infer<typeof TrafficPolicyItemSchema>;
export type TrafficPolicyItemInput = z.input<typeof TrafficPolicyItemSchema>;
export const TrafficPolicyObjectsSchema = z.object({ type: z.literal("trafficpolicyobjects"), items: items(TrafficPolicyItemSchema) });
/** `namespace` null: a GlobalSecurityProfile (cluster-scoped). */
const SecurityProfileRef = { id: ItemIdSchema, namespace: TeamName.nullable(), name: SecurityProfileName, uid: z.string().min(1).max(MAX_NAME_LENGTH) };
export const SecurityProfileUpsertSchema = z.object({ ...SecurityProfileRef, generation: z.int().nonnegative(), spec: SecurityProfileSpec });
export const SecurityProfileDeletionSchema = z.object({ ...SecurityProfileRef, deleted: z.literal(true) });
export const SecurityProfileStatusQuerySchema = z.object({ ...SecurityProfileRef, status: z.literal(true) });
/** The namespace's objects now (the edge keeps admin-API profiles of the team too, so it prunes nothing). */
export const SecurityProfileInventorySchema = z.object({ id: ItemIdSchema, namespace: TeamName, present: z.array(SecurityProfileName).max(MAX_SECURITY_PROFILES) });
export const SecurityProfileItemSchema = z.union([SecurityProfileDeletionSchema, SecurityProfileStatusQuerySchema, SecurityProfileInventorySchema, SecurityProfileUpsertSchema]);
export type SecurityProfileItem = z.infer<typeof SecurityProfileItemSchema>;
export type SecurityProfileItemInput = z.input<typeof SecurityProfileItemSchema>;
export const SecurityProfileObjectsSchema = z.object({ type: z.literal("securityprofileobjects"), items: items(SecurityProfileItemSchema) });

/**
 * `applied`: done (for claims: all `replicas` are claimed); `stale`: superseded by what the edge
 * already has (older generation, request against an older sandbox generation); `rejected`: not
 * done, `code` (the edge's error code, e.g. `template_not_found`) and `message` say why.
 */
export const ReplyItemSchema = z.object({
  id: ItemIdSchema,
  result: z.enum(["applied", "stale", "rejected"]),
  code: z.string().max(MAX_NAME_LENGTH).optional(),
  message: z.string().max(MAX_MESSAGE_LENGTH).optional(),
  /** Claims: every sandbox the claim holds (earlier ones included; at most `replicas`). */
  sandboxIds: z.array(SandboxIdSchema).max(1000).optional(),
  /** Autoscalers: the pool autoscaler's status after the item (absent once deleted). */
  autoscaler: AutoscalerStatusReplySchema.optional(),
  /** Update ops: the run's status after the item (absent once deleted). */
  updateOps: UpdateOpsStatusReplySchema.optional(),
  /** Traffic policies: the live sandboxes the policy selects (its status). */
  selectedSandboxes: z.array(SandboxIdSchema).max(1000).optional(),
});
export type ReplyItem = z.infer<typeof ReplyItemSchema>;

export const RepliesSchema = z.object({ type: z.literal("replies"), items: items(ReplyItemSchema) });
