// E2B's template build API (`Template.build` of the SDKs): the request bodies the edge reads and
// the shapes it answers, bounded. Step arguments are data: the agent runs them only inside a
// build sandbox (controllers/drivers/local/builder/), never on the host.
import { z } from "zod";
import { MAX_LIST_ITEMS, MAX_NAME_LENGTH, MAX_PATH_LENGTH, MAX_TEMPLATE_CPU_COUNT, MAX_TEMPLATE_MEMORY_MB } from "./limits.ts";
import { EnvVars } from "./sandbox.ts";
import { TemplateId } from "./template.ts";

/** Steps of one build. Each becomes at most one overlay layer, and overlayfs takes a bounded
 * lowerdir list (one page of paths), so the count is bounded well below that. */
export const MAX_BUILD_STEPS = 64;
/** Arguments of one step, and the length of one (a command line, a copy's path). */
export const MAX_STEP_ARGS = 512;
export const MAX_STEP_ARG_LENGTH = 64 * 1024;
/** One uploaded `copy` archive (stored content-addressed in libSQL as one blob). */
export const MAX_TEMPLATE_FILE_BYTES = 16 * 1024 * 1024;
/** Uploaded archives of one team, in bytes (each at least 4 KiB): an upload past it is a 429
 * (libSQL holds them all). */
export const MAX_TEAM_FILE_BYTES = 256 * 1024 * 1024;
/** An archive no build has started with for this long (since its upload or its last use) is
 * removed at the team's next upload; the SDK uploads it again when a build needs it. */
export const TEMPLATE_FILE_TTL_MS = 7 * 24 * 3_600_000;
/** Builds of one team running at once (each is a build sandbox on the agent). */
export const MAX_TEAM_BUILDS = 2;
/** Builds of one team requested and not started yet: a request past it fails the oldest of them
 * ("never started"; the SDK starts a build right after requesting it). */
export const MAX_TEAM_WAITING_BUILDS = 16;
/** A build not started this long after its request fails ("never started") at the team's next request. */
export const WAITING_BUILD_TTL_MS = 24 * 3_600_000;
/** Finished builds of one team whose log lines are kept (the newest; older ones keep their status). */
export const LOGGED_BUILDS_PER_TEAM = 64;
/** Log entries kept per build; the agent stops sending past it and says so. */
export const MAX_BUILD_LOG_ENTRIES = 10_000;
/** A build that reports nothing for this long has lost its agent and is failed. */
export const BUILD_SILENCE_MS = 30 * 60_000;

const CpuCount = z.int().min(1).max(MAX_TEMPLATE_CPU_COUNT);
const MemoryMB = z.int().min(128).max(MAX_TEMPLATE_MEMORY_MB);

/** `name` or `name:tag` (E2B: a tag in the name counts as one of `tags`). */
export const TemplateTag = z.string().regex(/^[a-z0-9]([-a-z0-9_.]{0,62}[a-z0-9])?$/, "tags are [a-z0-9][-a-z0-9_.]*, at most 64");
export const TemplateRef = z
  .string()
  .max(128)
  .transform((s, ctx) => {
    const [name, tag, ...rest] = s.split(":");
    const id = TemplateId.safeParse(name);
    const t = tag === undefined ? undefined : TemplateTag.safeParse(tag);
    if (!id.success || rest.length || (t && !t.success)) {
      ctx.addIssue({ code: "custom", message: "a template name is [a-z0-9][-a-z0-9_.]* (at most 64), optionally :tag" });
      return z.NEVER;
    }
    return { name: id.data, tag: t?.data };
  });

/** `POST /v3/templates` (and `/v2/templates`, which names it `alias`). */
export const TemplateBuildRequest = z.object({
  name: TemplateRef.optional(),
  alias: TemplateRef.optional(),
  tags: z.array(TemplateTag).max(MAX_LIST_ITEMS).optional(),
  cpuCount: CpuCount.optional(),
  memoryMB: MemoryMB.optional(),
  minFreeDiskMb: z.int().min(0).max(16 * 1_048_576).optional(),
  /** Deprecated by E2B; the key's team is used. */
  teamID: z.string().max(MAX_NAME_LENGTH).optional(),
});

export const StepType = z.enum(["RUN", "COPY", "ENV", "WORKDIR", "USER"]);
export const TemplateStep = z.object({
  type: StepType,
  args: z.array(z.string().max(MAX_STEP_ARG_LENGTH)).max(MAX_STEP_ARGS).default([]),
  filesHash: z.string().regex(/^[a-f0-9]{64}$/, "filesHash is a sha256 in hex").optional(),
  force: z.boolean().default(false),
});
export type TemplateStep = z.infer<typeof TemplateStep>;

/** `POST /v2/templates/{id}/builds/{buildID}`. */
export const TemplateBuildStart = z
  .object({
    fromImage: z.string().min(1).max(MAX_NAME_LENGTH).optional(),
    fromTemplate: TemplateRef.optional(),
    fromImageRegistry: z.unknown().optional(),
    force: z.boolean().default(false),
    steps: z.array(TemplateStep).max(MAX_BUILD_STEPS, `at most ${MAX_BUILD_STEPS} steps`).default([]),
    startCmd: z.string().max(MAX_PATH_LENGTH).optional(),
    readyCmd: z.string().max(MAX_PATH_LENGTH).optional(),
  })
  .superRefine((b, ctx) => {
    for (const [i, s] of b.steps.entries()) {
      const bad = stepProblem(s);
      if (bad) ctx.addIssue({ code: "custom", path: ["steps", i], message: bad });
    }
    // The template's env is bounded as a sandbox's is, by the same schema (the build's result
    // carries it to the edge, schema/protocol/build.ts): names, `__proto__`, lengths, count. What a
    // base template adds is checked at startBuild and by the builder.
    const env = EnvVars.safeParse(stepsEnv(b.steps));
    for (const i of env.success ? [] : env.error.issues) {
      // A bad name's reasons are nested (zod's invalid_key): they say what a name may be.
      const why = i.code === "invalid_key" ? i.issues.map((k) => k.message).join("; ") : i.message;
      ctx.addIssue({ code: "custom", path: ["steps"], message: `ENV${i.path.length ? ` ${String(i.path[0]).slice(0, 64)}` : ""}: ${why}` });
    }
  });
export type TemplateBuildStart = z.infer<typeof TemplateBuildStart>;

/** The env the steps' ENV pairs set, in order (a later one wins), over `base`: own keys only, so a
 * `__proto__` name stays a key its schema (EnvVars) refuses rather than vanishing. */
export function stepsEnv(steps: readonly TemplateStep[], base: Record<string, string> = {}): Record<string, string> {
  return Object.fromEntries([...Object.entries(base), ...steps.flatMap((s) => (s.type === "ENV" ? s.args.flatMap((_, i) => (i % 2 ? [] : [[s.args[i]!, s.args[i + 1] ?? ""] as const])) : []))]);
}
const USER_NAME = /^[a-z_][a-z0-9_-]{0,31}$/;

/** What the SDKs send per step type (`args` positions), checked so the builder never guesses. */
function stepProblem(s: TemplateStep): string | undefined {
  const a = s.args;
  if (a.some((x) => x.includes("\0"))) return "step arguments cannot hold NUL";
  switch (s.type) {
    case "RUN":
      if (a.length < 1 || a.length > 2 || !a[0]) return "RUN takes [command, user?]";
      if (a[1] && !USER_NAME.test(a[1])) return "RUN's user is a Linux user name";
      return;
    case "COPY":
      if (a.length < 2 || a.length > 4 || !a[0] || !a[1]) return "COPY takes [src, dest, user?, mode?]";
      if (!s.filesHash) return "COPY needs the filesHash its upload was stored under";
      if (a[0].split("/").includes("..")) return "COPY's src stays inside the build context";
      if (a[2] && !USER_NAME.test(a[2])) return "COPY's user is a Linux user name";
      if (a[3] && !/^0?[0-7]{3,4}$/.test(a[3])) return "COPY's mode is octal";
      return;
    case "ENV":
      if (a.length === 0 || a.length % 2) return "ENV takes [name, value, …] pairs";
      return; // names and values: the whole env's EnvVars check in TemplateBuildStart
    case "WORKDIR":
      if (a.length !== 1 || !a[0]?.startsWith("/") || a[0].includes("\0")) return "WORKDIR takes one absolute path";
      if (a[0].length > MAX_PATH_LENGTH) return `WORKDIR's path is at most ${MAX_PATH_LENGTH} characters`;
      return;
    case "USER":
      if (a.length !== 1 || !USER_NAME.test(a[0]!)) return "USER takes one Linux user name";
      return;
  }
}

export const BuildStatus = z.enum(["waiting", "building", "ready", "error"]);
export type BuildStatus = z.infer<typeof BuildStatus>;
export const LogLevel = z.enum(["debug", "info", "warn", "error"]);

export interface BuildLogEntry {
  timestamp: string;
  level: z.infer<typeof LogLevel>;
  message: string;
  step?: string;
}

export interface BuildReason {
  message: string;
  step?: string;
  logEntries?: BuildLogEntry[];
}

/** `GET /templates/{id}/builds/{buildID}/status` (E2B `TemplateBuildInfo`). */
export interface TemplateBuildInfo {
  templateID: string;
  buildID: string;
  status: BuildStatus;
  logEntries: BuildLogEntry[];
  logs: string[];
  reason?: BuildReason;
}

export const BuildStatusQuery = z.object({ logsOffset: z.coerce.number().int().min(0).max(1_000_000).default(0) });
export const BuildLogsQuery = z.object({
  cursor: z.coerce.number().int().min(0).optional(),
  limit: z.coerce.number().int().min(0).max(100).default(100),
  direction: z.enum(["forward", "backward"]).default("forward"),
  level: LogLevel.optional(),
});

/** `POST /templates/tags`: `target` is `name:tag`, the build the tags then point at. */
export const AssignTags = z.object({ target: TemplateRef, tags: z.array(TemplateTag).min(1).max(MAX_LIST_ITEMS) });
export const DeleteTags = z.object({ name: TemplateRef, tags: z.array(TemplateTag).min(1).max(MAX_LIST_ITEMS) });
