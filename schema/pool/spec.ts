import { z } from "zod";
import { PauseStrategySchema, TemplateSpecSchema } from "../protocol/intent.ts";

/** Kubernetes IntOrString: an absolute count or a percentage of `replicas` (`"20%"`). */
export const IntOrPercentSchema = z.union([
  z.number().int().nonnegative(),
  z.string().regex(/^\d{1,3}%$/, 'a percentage such as "20%"'),
]);
export type IntOrPercent = z.infer<typeof IntOrPercentSchema>;

/**
 * A SandboxSet: keep `replicas` unclaimed members (creating + available) of `template` warm on
 * `cluster`. Mirrors OpenKruise's SandboxSet (`openkruise-agents.md` §1.2): scale-up is capped by
 * `scaleStrategy.maxUnavailable` (unset = unlimited), a rolling update of unclaimed members by
 * `updateStrategy.maxUnavailable` (default 20 %, rounded up). Claimed sandboxes are never touched.
 */
export const PoolSpecSchema = z.object({
  teamId: z.string().min(1),
  templateId: z.string().min(1),
  cluster: z.string().regex(/^[a-z0-9-]{1,63}$/).default("local"),
  replicas: z.number().int().min(0).max(100_000),
  /** The template at its current revision; members of other revisions are rolled. */
  template: TemplateSpecSchema,
  pauseStrategy: PauseStrategySchema.default("Freeze"),
  allowInternetAccess: z.boolean().default(true),
  envVars: z.record(z.string(), z.string()).default({}),
  labels: z.record(z.string(), z.string()).default({}),
  scaleStrategy: z.object({ maxUnavailable: IntOrPercentSchema.nullable().default(null) }).prefault({}),
  updateStrategy: z.object({ maxUnavailable: IntOrPercentSchema.default("20%") }).prefault({}),
});
export type PoolSpec = z.infer<typeof PoolSpecSchema>;
export type PoolSpecInput = z.input<typeof PoolSpecSchema>;

/** The PoolDO name for a team's template: one pool per team + template. */
export function poolName(teamId: string, templateId: string): string {
  return `${teamId}/${templateId}`;
}
