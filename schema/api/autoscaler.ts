// PoolAutoscaler spec (OpenKruise Agents §1.9) as the admin API accepts it and PoolDO keeps it:
// the CRD's spec without `scaleTargetRef` (the admin path names the pool). The CRD front door
// (ClusterDO's sync of PoolAutoscalers) parses into the same shape.
import { z } from "zod";
import { isTimeZone, parseCron } from "../../lib/cron.ts";
import { IntOrPercent } from "./template.ts";

/** Five cron fields (minute hour day-of-month month day-of-week), numbers, ranges, steps, lists, names. */
export const CronSchedule = z.string().max(200).regex(/^\S+( \S+){4}$/, "a 5-field cron schedule like '* 9-17 * * 1-5'");

export const CronPolicy = z
  .strictObject({
    name: z.string().min(1).max(63),
    schedule: CronSchedule,
    /** IANA time zone the schedule's wall-clock fields are read in; default UTC. */
    timeZone: z.string().min(1).max(64).optional(),
    targetReplicas: z.int().min(0).max(100_000),
  })
  .superRefine((p, ctx) => {
    try {
      parseCron(p.schedule);
    } catch (err) {
      ctx.addIssue({ code: "custom", path: ["schedule"], message: (err as Error).message });
    }
    if (p.timeZone !== undefined && !isTimeZone(p.timeZone)) ctx.addIssue({ code: "custom", path: ["timeZone"], message: `"${p.timeZone}" is not an IANA time zone` });
  });
export type CronPolicy = z.infer<typeof CronPolicy>;

const Window = z.strictObject({ stabilizationWindowSeconds: z.int().min(0).max(3600) });

export const CapacityPolicy = z.strictObject({
  targetAvailable: IntOrPercent,
  tolerance: IntOrPercent.default("10%"),
  scaleUp: Window.default({ stabilizationWindowSeconds: 0 }),
  scaleDown: Window.default({ stabilizationWindowSeconds: 300 }),
});

export const AutoscalerSpec = z
  .strictObject({
    minReplicas: z.int().min(0).max(100_000).default(0),
    maxReplicas: z.int().min(1).max(100_000),
    cronPolicies: z.array(CronPolicy).max(32).default([]),
    capacityPolicy: CapacityPolicy.optional(),
    suspend: z.boolean().default(false),
    /** How often the pool samples itself and how many seconds of samples a scale-down averages
     * (upstream's controller flags `--sampling-interval-seconds` 5 and
     * `--observation-window-seconds` 30, per autoscaler here; not in the CRD). */
    sampling: z
      .strictObject({ intervalSeconds: z.int().min(1).max(60).default(5), windowSeconds: z.int().min(1).max(600).default(30) })
      .default({ intervalSeconds: 5, windowSeconds: 30 }),
  })
  .refine((s) => s.minReplicas <= s.maxReplicas, { message: "minReplicas must not exceed maxReplicas", path: ["minReplicas"] })
  .refine((s) => new Set(s.cronPolicies.map((p) => p.name)).size === s.cronPolicies.length, { message: "cron policy names must be unique", path: ["cronPolicies"] });
export type AutoscalerSpec = z.infer<typeof AutoscalerSpec>;
