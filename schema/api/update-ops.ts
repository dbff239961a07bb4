// SandboxUpdateOps (OpenKruise §1.6, §2.4) as the admin API accepts it: upgrade a team's claimed
// sandboxes chosen by label selector and state, a bounded batch at a time, to their template's
// current revision. The same shape comes from a synced CRD's spec.
import { z } from "zod";
import { MAX_LIST_ITEMS, MAX_NAME_LENGTH } from "./limits.ts";
import { IntOrPercent } from "./template.ts";
import { Hook } from "./hooks.ts";

const LabelValue = z.string().max(63);

export const LabelSelector = z.strictObject({
  matchLabels: z
    .record(z.string().min(1).max(MAX_NAME_LENGTH), LabelValue)
    .refine((m) => Object.keys(m).length <= MAX_LIST_ITEMS, `at most ${MAX_LIST_ITEMS} matchLabels`)
    .optional(),
  matchExpressions: z
    .array(
      z.strictObject({
        key: z.string().min(1).max(MAX_NAME_LENGTH),
        operator: z.enum(["In", "NotIn", "Exists", "DoesNotExist"]),
        values: z.array(LabelValue).max(MAX_LIST_ITEMS).optional(),
      }),
    )
    .max(MAX_LIST_ITEMS)
    .optional(),
});
export type LabelSelector = z.infer<typeof LabelSelector>;

export const UpdateOpsStrategy = z.enum(["Recreate", "CheckpointRestore"]);
export type UpdateOpsStrategy = z.infer<typeof UpdateOpsStrategy>;

export const UpdateOpsSpec = z.strictObject({
  selector: LabelSelector,
  updateStrategy: z
    .strictObject({ type: UpdateOpsStrategy.default("Recreate"), maxUnavailable: IntOrPercent.default(1) })
    .default({ type: "Recreate", maxUnavailable: 1 }),
  /** Stop starting new upgrades (those under way finish). */
  paused: z.boolean().default(false),
  stateFilter: z
    .strictObject({ states: z.array(z.enum(["Running", "Paused"])).min(1).max(2).default(["Running"]) })
    .default({ states: ["Running"] }),
  /** Hooks of this run, in place of the template's own `lifecycle.preUpgrade`/`postUpgrade`. */
  lifecycle: z.strictObject({ preUpgrade: Hook.optional(), postUpgrade: Hook.optional() }).optional(),
});
export type UpdateOpsSpec = z.infer<typeof UpdateOpsSpec>;

/** An ops run's name: a DNS-1123 label, as the CRD object's. */
export const UpdateOpsName = z.string().regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, "name must be a DNS-1123 label");

/** `POST /admin/teams/{team}/updateops`. */
export const NewUpdateOps = UpdateOpsSpec.extend({ name: UpdateOpsName });

/** `PATCH /admin/teams/{team}/updateops/{name}`: what may change after create (selector and
 * strategy type are fixed, as the CRD's webhook keeps them). */
export const UpdateOpsChange = z.strictObject({ paused: z.boolean().optional(), maxUnavailable: IntOrPercent.optional() });

/** Whether `labels` match `selector` (Kubernetes' rules; an empty selector matches everything). */
export function selectorMatches(selector: LabelSelector, labels: Readonly<Record<string, string>>): boolean {
  for (const [k, v] of Object.entries(selector.matchLabels ?? {})) if (labels[k] !== v) return false;
  for (const e of selector.matchExpressions ?? []) {
    const has = Object.hasOwn(labels, e.key);
    const inValues = has && (e.values ?? []).includes(labels[e.key]!);
    if (e.operator === "In" && !inValues) return false;
    if (e.operator === "NotIn" && inValues) return false;
    if (e.operator === "Exists" && !has) return false;
    if (e.operator === "DoesNotExist" && has) return false;
  }
  return true;
}
