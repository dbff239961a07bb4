import { z } from "zod";
import { MAX_MESSAGE_LENGTH, MAX_NAME_LENGTH, MAX_PATH_LENGTH, MAX_TEMPLATE_CONFIG_BYTES } from "../api/limits.ts";
import { EnvVars } from "../api/sandbox.ts";
import { MAX_BUILD_STEPS, TemplateStep } from "../api/template-build.ts";
import { jsonBytes } from "./batches.ts";

/*
 * Template builds over the agent's session (only with an edge listing "builds" in
 * welcome.features, and to an agent whose hello says `capabilities.builder`):
 *
 *   edge  → agent build        one build: its base, steps, and the rootfs template to produce
 *   agent → edge  buildEvents  log lines as they happen (batched), and once the end: ready with
 *                              the template's final config, or error with the reason
 *   edge  → agent buildAcks    (an edge listing "buildAcks", to frames that ask: `ack`) the
 *                              builds whose result the edge has stored, or had already
 *
 * A build frame is not redelivered: an agent that loses its data directory loses the build, and
 * the edge fails a build that reports nothing for BUILD_SILENCE_MS. A result is delivered at least
 * once to an edge listing BUILD_ACKS_FEATURE: the agent keeps it (its journal) until the edge
 * acks it, and sends it again after a reconnect and every RESULT_RESEND_MS (the local builder's) meanwhile; the edge
 * applies a build's first result only (one already ended stays as it ended). Log lines are not
 * acked: those sent just before a session drops may be lost.
 */
export const BUILD_FEATURE = "builds";
/** Welcome feature: this edge answers a `buildEvents` frame that says `ack` with `buildAcks` once
 * its results are stored. An older edge does not: the agent then forgets a build once its result
 * left (at most once, as before). */
export const BUILD_ACKS_FEATURE = "buildAcks";

const BuildId = z.string().regex(/^[a-z0-9-]{1,64}$/);
/** A rootfs template name in the agent's RootfsStore. */
const RootfsName = z.string().regex(/^[a-z0-9][a-z0-9._-]{0,62}$/);

export const BuildFrameSchema = z.object({
  type: z.literal("build"),
  buildId: BuildId,
  /** The owning team's id: part of every step's cache key, so no team reuses another's layers. */
  teamId: z.string().min(1).max(MAX_NAME_LENGTH),
  /** Base: a rootfs template name (from another template), or an image reference to map. */
  from: z.union([z.object({ rootfs: RootfsName }), z.object({ image: z.string().min(1).max(MAX_NAME_LENGTH) })]),
  steps: z.array(TemplateStep).max(MAX_BUILD_STEPS),
  /** What the first step runs with: the base template's user, workdir and env (`fromTemplate`, as
   * an image's USER/WORKDIR/ENV carry into a Dockerfile built FROM it). Absent: E2B's defaults. */
  config: z.object({ user: z.string().max(32), workdir: z.string().max(MAX_PATH_LENGTH), env: EnvVars }).optional(),
  force: z.boolean(),
  /** Each step's cgroup limits: the build's CPU and memory (as reserved in the team quota). */
  cpuCount: z.int().min(1).max(256).default(1),
  memoryMB: z.int().min(128).max(1_048_576).default(512),
  /** The RootfsStore template the result is published as. */
  output: RootfsName,
  /** Where the agent fetches a copy step's archive, by filesHash: a path on the edge, sent with
   * the cluster token. */
  filesPath: z.string().max(MAX_PATH_LENGTH),
});
export type BuildFrame = z.infer<typeof BuildFrameSchema>;

export const BuildLogSchema = z.object({
  /** Per build, from 0, increasing: the edge keeps the first copy of each. */
  seq: z.int().min(0),
  at: z.int().min(0),
  level: z.enum(["debug", "info", "warn", "error"]),
  message: z.string().max(MAX_MESSAGE_LENGTH),
  /** E2B's step label: "base", the step's index from 1, or "finalize". */
  step: z.string().max(16).optional(),
});
export type BuildLog = z.infer<typeof BuildLogSchema>;

export const BuildResultSchema = z.union([
  z.object({
    status: z.literal("ready"),
    /** What every sandbox of the template starts with (the last USER, WORKDIR, ENV). */
    user: z.string().max(32),
    workdir: z.string().max(MAX_PATH_LENGTH),
    env: EnvVars,
  }),
  z.object({ status: z.literal("error"), message: z.string().max(MAX_MESSAGE_LENGTH), step: z.string().max(16).optional() }),
]);
export type BuildResult = z.infer<typeof BuildResultSchema>;

/** Why a template's final config cannot be a build's ready result (past the link's schema, or past
 * MAX_TEMPLATE_CONFIG_BYTES as JSON), else undefined: the builder's check before any step runs and
 * the edge's at startBuild (a base's env plus the steps'). */
export function configProblem(config: { user: string; workdir: string; env: Record<string, string> }): string | undefined {
  const result = { status: "ready" as const, ...config };
  const fits = BuildResultSchema.safeParse(result);
  if (!fits.success) return `the template's final config exceeds what a template may hold: ${fits.error.issues.map((i) => `${i.path.join(".").slice(0, 80)}: ${i.message}`).join("; ")}`;
  const bytes = jsonBytes(result);
  if (bytes > MAX_TEMPLATE_CONFIG_BYTES) return `the template's final config is ${bytes} bytes as JSON, more than the ${MAX_TEMPLATE_CONFIG_BYTES} a template may hold`;
  return undefined;
}

export const BuildEventsSchema = z.object({
  type: z.literal("buildEvents"),
  items: z
    .array(z.object({ buildId: BuildId, logs: z.array(BuildLogSchema).max(500), result: BuildResultSchema.optional() }))
    .min(1)
    .max(64),
  /** The agent waits for `buildAcks` of the results in this frame (sent only to an edge listing
   * BUILD_ACKS_FEATURE; an older edge drops the field unread). */
  ack: z.boolean().optional(),
});
export type BuildEvents = z.infer<typeof BuildEventsSchema>;

/** The builds whose results of an acked `buildEvents` frame the edge has stored (or had stored
 * before, or cannot store: a build it no longer has): the agent forgets them. */
export const BuildAcksSchema = z.object({
  type: z.literal("buildAcks"),
  buildIds: z.array(BuildId).min(1).max(64),
});
export type BuildAcks = z.infer<typeof BuildAcksSchema>;
