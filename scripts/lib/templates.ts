// The project's own templates built from steps: `code-interpreter`, written with the E2B SDK's own
// `Template()` builder from `base`. A running system builds it through its edge's HTTP build API
// with the SDK's `Template.build`, as the admin team (`buildCodeInterpreterOnEdge`: a build
// record, status and logs like any team's build). Where no edge runs yet (`.ci/run`, the test
// tiers' global setup) the same steps go through the template builder the agent runs
// (controllers/drivers/local/builder/direct-build.ts) under the admin team's id, so they warm the
// very layers (cached by step key under ~/.cache/sandbox-edge/rootfs) the edge's build then finds:
// a second build takes seconds.
import { Template, type LogEntry, type TemplateClass } from "e2b";
import { ADMIN_TEAM_ID } from "../../schema/api/api-key.ts";
import { TemplateStep } from "../../schema/api/template-build.ts";
import { DEFAULT_CONFIG, layerIdOf, planSteps } from "../../controllers/drivers/local/builder/plan.ts";
import { runDirectBuild } from "../../controllers/drivers/local/builder/direct-build.ts";
import { RootfsStore } from "../../controllers/drivers/local/rootfs/store.ts";
import { ensureBaseRootfs } from "../../controllers/drivers/local/rootfs/build-base.ts";
import type { BuildLog } from "../../schema/protocol/build.ts";
import type { TemplateSpec } from "../../schema/api/template.ts";

/** The builds' owner in every step key: the admin team, which owns the project's public templates
 * and builds them through the edge; a direct build under its id makes the layers that build finds
 * (other teams' keys are their own ids: never shared). */
export const PROJECT_OWNER = ADMIN_TEAM_ID;

/** The name the project's code-interpreter template is built under (`code-interpreter-v1`, the
 * SDKs' default, is registered beside it with the same spec: scripts/seed.ts). */
export const CODE_INTERPRETER = "code-interpreter";

/**
 * The code interpreter's template: base plus Jupyter's Python kernel and the client library the
 * agent-runtime's kernel driver uses inside the sandbox (controllers/runtime/interpreter/,
 * `jupyter_client.manager.KernelManager` starting `ipykernel`), with the data libraries E2B's
 * image has. Debian's packages from base's own apt sources (Debian's archive, or the mirror base
 * was built from): signed, the versions the kernel driver was written against, and no pip over
 * Debian's Python (PEP 668). Without recommends, as base itself is built (mmdebstrap): with
 * them apt adds LLVM, numba and pytest, 0.7 GB more.
 */
export function codeInterpreterTemplate() {
  return (
    Template()
      .fromTemplate("base")
      // Every apt step is aptInstall's own commands, then apt's downloads and indexes go in the
      // same step, as the Kubernetes image's RUNs do: left, they were 325 of the Python layer's
      // 1413 MB and 112 of the R layer's 175 MB (removed by a later step they would stay in the
      // layer below under whiteouts).
      .runCmd([...aptInstallCommands(["python3-ipykernel", "python3-jupyter-client", "python3-matplotlib", "python3-numpy", "python3-pandas"]), ...APT_CLEAN], { user: "root" })
      // R cells (`language: "r"`): R and IRkernel, which registers Jupyter's `ir` kernel spec the
      // kernel driver starts. Its own last step, so the layers above stay cached when it changes.
      .runCmd([...aptInstallCommands(["r-base-core", "r-cran-irkernel"]), ...APT_CLEAN], { user: "root" })
  );
}

/** What the SDK's `aptInstall(packages, { noInstallRecommends: true })` runs (e2b's template
 * builder), to be followed by more commands in the same step. */
function aptInstallCommands(packages: string[]): string[] {
  return ["apt-get update", `DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes apt-get install -y --no-install-recommends ${packages.join(" ")}`];
}

/** Drops apt's downloaded archives, its package caches and its lists (apt-get update brings them back). */
const APT_CLEAN = ["apt-get clean", "rm -rf /var/lib/apt/lists/*"];

/** The steps `Template.build` would send for a template, as the builder reads them. */
export async function templateSteps(t: TemplateClass): Promise<{ from: string; steps: TemplateStep[] }> {
  const json = JSON.parse(await Template.toJSON(t, false)) as { fromTemplate?: string; steps: unknown[] };
  if (!json.fromTemplate) throw new Error("a project template starts from another template (fromTemplate)");
  return { from: json.fromTemplate, steps: json.steps.map((s) => TemplateStep.parse(s)) };
}

export type Log = (line: string) => void;

/**
 * The layers a build of the code-interpreter definition (or `definition`) gives on this machine
 * now: base's, then one per step that makes files, by the step keys the builder computes (the
 * admin team's, from base's layers and E2B's default config, which base's spec has). Undefined
 * while base is missing.
 */
export async function codeInterpreterLayers(store: RootfsStore, definition: TemplateClass = codeInterpreterTemplate()): Promise<string[] | undefined> {
  return (await plannedBuild(store, definition))?.layers;
}

async function plannedBuild(store: RootfsStore, definition: TemplateClass) {
  const base = store.template("base")?.layers;
  if (!base) return undefined;
  const json = JSON.parse(await Template.toJSON(definition, false)) as { startCmd?: string; readyCmd?: string };
  const { steps } = await templateSteps(definition);
  const plan = planSteps({ teamId: PROJECT_OWNER, buildId: "", baseLayers: base, steps, force: false });
  const layers = [...base, ...plan.steps.filter((p) => p.layer).map((p) => layerIdOf(p.key))];
  return { layers, config: plan.config, startCmd: json.startCmd, readyCmd: json.readyCmd };
}

/** What of a built template's spec a start-up compares with its definition: besides the layers,
 * what steps that make no layer (a trailing ENV/USER/WORKDIR) and the start/ready commands give. */
export type BuiltSpec = Pick<TemplateSpec, "image" | "user" | "workdir" | "env" | "startCmd" | "readyCmd">;

/**
 * Whether the built template `spec` is the current definition's: its root filesystem has the same
 * step keys, all there, and its user, workdir, env and start/ready commands are the ones the
 * definition gives now. A start-up keeps it and its pool rather than building again. Commands the
 * definition does not set are inherited from base at build time (the edge's `inheritedCommands`:
 * a start command brings its own ready command or none), so only those it sets are compared.
 */
export async function isCurrentCodeInterpreter(store: RootfsStore, spec: BuiltSpec, definition: TemplateClass = codeInterpreterTemplate()): Promise<boolean> {
  const planned = await plannedBuild(store, definition);
  const image = spec.image;
  const built = /^b-[a-z0-9-]{1,64}$/.test(image) && store.templateTrees(image) ? store.template(image)!.layers : undefined;
  if (planned === undefined || built === undefined || built.join("\n") !== planned.layers.join("\n")) return false;
  const { config } = planned;
  if (spec.user !== config.user || spec.workdir !== config.workdir || !sameEnv(spec.env, config.env)) return false;
  if (planned.startCmd !== undefined) return spec.startCmd === planned.startCmd && spec.readyCmd === planned.readyCmd;
  return planned.readyCmd === undefined || spec.readyCmd === planned.readyCmd;
}

function sameEnv(a: Record<string, string>, b: Record<string, string>): boolean {
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((k) => Object.hasOwn(b, k) && a[k] === b[k]);
}

/**
 * Builds (or finds cached) the `code-interpreter` rootfs template; needs `base` built and root.
 * Resolves with how many steps ran; throws with the failing step's reason (its output was logged).
 */
export async function buildCodeInterpreter(log: Log, opts: { progress?: boolean } = {}, store = new RootfsStore()): Promise<{ ran: number; cached: number; seconds: number }> {
  const started = Date.now();
  const { from, steps } = await templateSteps(codeInterpreterTemplate());
  const counts = { ran: 0, cached: 0 };
  const show = opts.progress ? progressFilter() : (l: BuildLog) => l.message;
  const r = await runDirectBuild({ from, steps, output: CODE_INTERPRETER, owner: PROJECT_OWNER }, (entry) => {
    if (/^CACHED \[\d+\/\d+\]/.test(entry.message)) counts.cached++;
    else if (/^\[\d+\/\d+\] /.test(entry.message)) counts.ran++;
    const line = show(entry);
    if (line !== undefined) log(line);
  }, store);
  if (r.status === "error") throw new Error(`building the code-interpreter template failed: ${r.message}`);
  // The rootfs store keeps layers, not the final user/workdir/env (the edge keeps those for
  // `Template.build`'s templates); the seeded spec uses base's, so the steps must leave them so.
  if (r.user !== DEFAULT_CONFIG.user || r.workdir !== DEFAULT_CONFIG.workdir || Object.keys(r.env).length) {
    throw new Error("the code-interpreter template's steps changed its user, workdir or env, which the rootfs store does not keep");
  }
  return { ...counts, seconds: Math.round((Date.now() - started) / 100) / 10 };
}

/** `base` from its Debian recipe (when missing), then `code-interpreter` from it: what `.ci/run`,
 * the test tiers' setup and the Python system tests' system run before any test. */
export async function prebuildTemplates(log: Log, opts: { progress?: boolean } = {}): Promise<void> {
  const store = new RootfsStore();
  const base = await ensureBaseRootfs(store, (line) => log(`[rootfs] ${line}`));
  log(`[rootfs] base: ${base.built ? "built" : "cached"}`);
  const ci = await buildCodeInterpreter((line) => log(`[code-interpreter] ${line}`), opts, store);
  log(`[code-interpreter] ready in ${ci.seconds} s: ${ci.ran} step(s) built, ${ci.cached} cached`);
}

/**
 * Builds `code-interpreter` through a running edge's HTTP build API with the SDK's own
 * `Template.build` (`POST /v3/templates`, start, status polled with its log lines), as the team of
 * `apiKey`: a build record the edge keeps, `GET /templates/code-interpreter` lists it. The
 * template's spec.image becomes the build's rootfs (`b-<buildID>`). Cached steps: seconds.
 */
export async function buildCodeInterpreterOnEdge(apiUrl: string, apiKey: string, log: Log, opts: { progress?: boolean } = {}): Promise<{ buildId: string; ran: number; cached: number; seconds: number }> {
  const started = Date.now();
  const counts = { ran: 0, cached: 0 };
  const show = opts.progress === false ? (l: { message: string }) => l.message : progressFilter();
  const built = await Template.build(codeInterpreterTemplate(), CODE_INTERPRETER, {
    apiKey,
    apiUrl,
    // What the direct build gives a step (the step key does not depend on it): apt needs more than
    // a template's default 512 MiB.
    cpuCount: 2,
    memoryMB: 2048,
    onBuildLogs: (entry: LogEntry) => {
      if (/^CACHED \[\d+\/\d+\]/.test(entry.message)) counts.cached++;
      else if (/^\[\d+\/\d+\] /.test(entry.message)) counts.ran++;
      const line = show(entry);
      if (line !== undefined) log(line);
    },
  });
  return { buildId: built.buildId, ...counts, seconds: Math.round((Date.now() - started) / 100) / 10 };
}

/** The build's own lines (`FROM base`, `[1/1] RUN …`, `CACHED …`, the result), errors, and every
 * 50th package dpkg sets up: enough to see it move without apt's hundreds of lines. Reads the
 * message only, so it serves the builder's entries and the SDK's (which carry no step). */
export function progressFilter(): (entry: { level: string; message: string }) => string | undefined {
  let configured = 0;
  return (entry) => {
    const m = entry.message;
    if (entry.level === "error" || /^(CACHED )?\[\d+\/\d+\] |^E: |^FROM |^Template .* ready|^build steps have no network|^build steps run as the host|^The agent restarted|^removed the cgroup /.test(m)) return m;
    if (/^Setting up /.test(m) && ++configured % 50 === 0) return `configured ${configured} packages`;
    return undefined;
  };
}
