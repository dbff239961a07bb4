// Auto-pause by probe (OpenKruise Agents §1.1.3, Sandbox `spec.probes` + `autoPausePolicy`): an
// exec probe run inside the sandbox (or an HTTP GET to a port of it) every `periodSeconds`; while its trimmed output matches
// `messageRegex` continuously for `thresholdDuration` the sandbox is idle and pauses (with its
// lifecycle's strategy and prePause hook); a scheduled wake (`resume.at`, or the next minute of
// `resume.schedule` in `resume.timeZone`, or `resume.probed`: a second probe, run just before the
// pause, whose output is the next task's time, woken `leadTime` ahead) resumes it. An E2B create asks for it with the metadata
// extension `e2b.agents.kruise.io/auto-pause-policy` (JSON of this shape; upstream reads probes
// only from the Sandbox CRD and names no E2B extension for them).
import { z } from "zod";
import { isTimeZone, parseCron } from "../../lib/cron.ts";
import { CronSchedule } from "./autoscaler.ts";
import { MAX_PATH_LENGTH } from "./limits.ts";

/** Probe output longer than this is cut before matching (upstream keeps a condition message). */
export const MAX_PROBE_MESSAGE = 1024;

const GoDuration = z.string().regex(/^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$/, "a duration like 30s or 5m");

const Probe = z
  .strictObject({
    exec: z.strictObject({ command: z.array(z.string().max(4096)).min(1).max(64) }).optional(),
    /** A GET to a port of the sandbox; its body (status < 400) is the probe's output. */
    http: z
      .strictObject({
        port: z.int().min(1).max(65535),
        path: z.string().max(MAX_PATH_LENGTH).regex(/^\/[^\s#]*$/, "an absolute path with an optional query").default("/"),
      })
      .optional(),
    periodSeconds: z.int().min(1).max(3600).default(10),
    timeoutSeconds: z.int().min(1).max(60).default(5),
  })
  .refine((p) => (p.exec === undefined) !== (p.http === undefined), { message: "a probe has exactly one of exec and http" });
export type Probe = z.infer<typeof Probe>;

/** OpenKruise's `resume.whenProbedScheduleTime`: the probe's trimmed output is the next task's
 * time (`unix` seconds, or an ISO `datetime`); the sandbox wakes `leadTime` before it. A probe
 * that fails, or whose output is not such a time in the future of the wake, keeps the sandbox
 * running (fail-closed, as upstream). */
const ProbedResume = z.strictObject({ probe: Probe, timeFormat: z.enum(["unix", "datetime"]).default("unix"), leadTime: GoDuration.default("5m") });

export const AutoPausePolicy = z
  .strictObject({
    probe: Probe,
    messageRegex: z.string().min(1).max(256),
    thresholdDuration: GoDuration,
    resume: z
      .strictObject({ at: z.iso.datetime({ offset: true }).optional(), schedule: CronSchedule.optional(), timeZone: z.string().max(64).optional(), probed: ProbedResume.optional() })
      .refine((r) => [r.at, r.schedule, r.probed].filter((x) => x !== undefined).length === 1, { message: "resume has exactly one of at, schedule and probed" })
      .optional(),
  })
  .superRefine((p, ctx) => {
    try {
      new RegExp(p.messageRegex);
    } catch (err) {
      ctx.addIssue({ code: "custom", path: ["messageRegex"], message: `does not compile: ${(err as Error).message}` });
    }
    if (p.resume?.schedule) {
      try {
        parseCron(p.resume.schedule);
      } catch (err) {
        ctx.addIssue({ code: "custom", path: ["resume", "schedule"], message: (err as Error).message });
      }
    }
    if (p.resume?.timeZone && !isTimeZone(p.resume.timeZone)) ctx.addIssue({ code: "custom", path: ["resume", "timeZone"], message: `"${p.resume.timeZone}" is not an IANA time zone` });
  });
export type AutoPausePolicy = z.infer<typeof AutoPausePolicy>;
