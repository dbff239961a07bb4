// The pure part of a template build: which rootfs template a base names, and the cache key,
// config and label of every step. Deterministic, no I/O (the builder does the rest).
import { createHash } from "node:crypto";
import type { TemplateStep } from "../../../../schema/api/template-build.ts";
import { BUILT } from "./retire.ts";

/** What the first step runs with and the finished template gets unless a step changes it: E2B's
 * defaults for an image, the base template's own for `fromTemplate`. */
export interface BuildConfig {
  user: string;
  workdir: string;
  env: Record<string, string>;
}
export const DEFAULT_CONFIG: BuildConfig = { user: "user", workdir: "/home/user", env: {} };

/**
 * Image references the SDK sends (`fromBaseImage()`, `fromDebianImage()`), mapped to rootfs
 * templates this machine has. `base` is Debian bookworm with E2B base's tools, so a Debian image
 * is served by it; anything else must have been imported under its own name
 * (`rootfs/cli.ts import`), since no registry is reachable from here.
 */
const IMAGE_ALIASES: Record<string, string> = {
  "e2bdev/base": "base",
  "e2bdev/base:latest": "base",
  "debian:stable": "base",
  "debian:bookworm": "base",
  "debian:12": "base",
  "debian:latest": "base",
};

/** The rootfs template an image reference names here, or undefined (a build error). Never a
 * template a build published (`b-<buildID>`, any team's): an image reference is a name anyone may
 * write, and a build stands on another build only through `fromTemplate`, which the edge resolves
 * as the team's own or a public one (it sends `rootfs` then). */
export function rootfsForImage(image: string, has: (name: string) => boolean): string | undefined {
  const alias = IMAGE_ALIASES[image];
  if (alias) return alias;
  const local = image.replace(/[^a-z0-9._-]/g, "-").replace(/^[^a-z0-9]+/, "").slice(0, 63);
  return local && !BUILT.test(local) && has(local) ? local : undefined;
}

export interface PlannedStep {
  /** E2B's step label: the step's index from 1. */
  label: string;
  step: TemplateStep;
  /** Config the step runs with (before its own change). */
  config: BuildConfig;
  /** Cache key of the tree after this step; a step that changes no files keeps its parent's. */
  key: string;
  /** Whether the step changes files (RUN, COPY, WORKDIR) and so makes a layer. */
  layer: boolean;
  /** Forced: the step and every later one are rebuilt (skipCache, force). */
  forced: boolean;
}

export function sha(...parts: string[]): string {
  const h = createHash("sha256");
  for (const p of parts) h.update(p).update("\0");
  return h.digest("hex");
}

/**
 * Plans the steps from a base whose layers are `baseLayers` and whose config is `config`. Keys chain: each is the hash of the
 * parent key, the step and the config it runs with, and the team (layers are never shared between
 * teams). A forced step mixes the build id in, so it and everything after it get new keys.
 */
export function planSteps(input: { teamId: string; buildId: string; baseLayers: string[]; steps: TemplateStep[]; force: boolean; config?: BuildConfig }): { steps: PlannedStep[]; config: BuildConfig } {
  let key = sha("template-build-v1", input.teamId, ...input.baseLayers);
  // Field order fixed: the config is part of each key, so a base with E2B's defaults keys as before.
  const start = input.config ?? DEFAULT_CONFIG;
  let config: BuildConfig = { user: start.user, workdir: start.workdir, env: { ...start.env } };
  let forced = input.force;
  const steps: PlannedStep[] = [];
  for (const [i, step] of input.steps.entries()) {
    forced ||= step.force;
    const layer = step.type === "RUN" || step.type === "COPY" || step.type === "WORKDIR";
    const before = config;
    config = applyConfig(config, step);
    if (layer || step.type === "ENV" || step.type === "USER") {
      key = sha(key, JSON.stringify({ type: step.type, args: step.args, filesHash: step.filesHash ?? null }), JSON.stringify(before), forced ? `force:${input.buildId}` : "");
    }
    steps.push({ label: String(i + 1), step, config: before, key, layer, forced });
  }
  return { steps, config };
}

function applyConfig(c: BuildConfig, step: TemplateStep): BuildConfig {
  switch (step.type) {
    case "ENV": {
      const env = { ...c.env };
      for (let i = 0; i + 1 < step.args.length; i += 2) env[step.args[i]!] = step.args[i + 1]!;
      return { ...c, env };
    }
    case "WORKDIR":
      return { ...c, workdir: step.args[0]! };
    case "USER":
      return { ...c, user: step.args[0]! };
    default:
      return c;
  }
}

/** The layer id a step's tree is stored under. */
export function layerIdOf(key: string): string {
  return `step-${key.slice(0, 48)}`;
}

/** One line of the build log for a step, as E2B's builder prints it. */
export function describeStep(p: PlannedStep, total: number): string {
  const args = p.step.type === "ENV" ? p.step.args.filter((_, i) => i % 2 === 0).map((k) => `${k}=…`) : p.step.args.slice(0, p.step.type === "COPY" ? 2 : 1);
  return `[${p.label}/${total}] ${p.step.type} ${args.join(" ").slice(0, 200)}`;
}
