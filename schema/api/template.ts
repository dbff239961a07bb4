// Templates: a SandboxSet spec per team (OpenKruise §1.2), as the admin API accepts it and
// PoolDO / SandboxGroupDO read it; plus the E2B `Template` / `TemplateWithBuilds` responses.
import { z } from "zod";
import { DEFAULT_ENVD_VERSION, MAX_NAME_LENGTH, MAX_PATH_LENGTH, MAX_TEMPLATE_CPU_COUNT, MAX_TEMPLATE_MEMORY_MB } from "./limits.ts";
import { EnvVars } from "./sandbox.ts";
import { Lifecycle } from "./hooks.ts";
import { CLUSTER_ID } from "../protocol/cluster-token.ts";

/** Absolute count or a percentage of replicas, as Kubernetes IntOrString. */
export const IntOrPercent = z.union([z.int().min(0), z.string().regex(/^\d{1,3}%$/, "a percentage like 20%")]);

export const TemplateId = z.string().regex(/^[a-z0-9]([-a-z0-9_.]{0,62}[a-z0-9])?$/, "template ids are [a-z0-9][-a-z0-9_.]*");

/** SandboxSet spec. Defaults make `{}` a valid 1-CPU, 512 MiB template with no warm pool. */
export const TemplateSpec = z.strictObject({
  /** Cluster (ClusterDO name) whose agent runs the members. */
  cluster: z.string().regex(CLUSTER_ID).default("local"),
  /** Unclaimed members to keep warm. */
  replicas: z.int().min(0).max(100_000).default(0),
  /** Container image (kubernetes driver) or root filesystem name (local driver). */
  image: z.string().min(1).max(MAX_NAME_LENGTH).default("base"),
  cpuCount: z.int().min(1).max(MAX_TEMPLATE_CPU_COUNT).default(1),
  /**
   * A SandboxSet's pod beside its main container, in cores (sent by the CRD sync, both or
   * neither): `restCpu` the other regular containers and sidecars, `initCpu` the largest peak of a
   * regular init container (an init container stating no CPU limit is given the pool's count:
   * pod-resources.ts `initCpuLimit`). A claim's in-place CPU value replaces the main container's
   * share only, so such a sandbox is charged `ceil(max(initCpu, restCpu + the in-place value))`
   * (durable-objects/operations/inplace-charge.ts). Derived from the pod template, which
   * `sourceRevision` already covers, so not part of the revision.
   */
  restCpu: z.number().min(0).max(MAX_TEMPLATE_CPU_COUNT).optional(),
  initCpu: z.number().min(0).max(MAX_TEMPLATE_CPU_COUNT).optional(),
  memoryMB: z.int().min(128).max(MAX_TEMPLATE_MEMORY_MB).default(512),
  diskSizeMB: z.int().min(1).max(16 * 1_048_576).default(1024),
  /** A Linux user name (useradd's rule). */
  user: z.string().regex(/^[a-z_][a-z0-9_-]{0,31}$/, "user is a Linux user name: [a-z_][a-z0-9_-], at most 32").default("user"),
  workdir: z.string().max(MAX_PATH_LENGTH).startsWith("/").default("/home/user"),
  envdVersion: z.string().regex(/^\d+\.\d+\.\d+$/).default(DEFAULT_ENVD_VERSION),
  /** Environment every process of every member gets (create-time envVars override it). */
  env: EnvVars.default({}),
  /** How `pause` releases a sandbox unless the request says otherwise (E2B keepMemory true = Freeze). */
  pauseStrategy: z.enum(["Freeze", "Stop"]).default("Freeze"),
  scaleStrategy: z.strictObject({ maxUnavailable: IntOrPercent.optional() }).default({}),
  updateStrategy: z.strictObject({ maxUnavailable: IntOrPercent.default("20%") }).default({ maxUnavailable: "20%" }),
  /**
   * The revision the cluster computed for a SandboxSet synced from Kubernetes (its pod template's
   * hash, `status.updateRevision`). Part of this spec's revision, so a change the fields above do
   * not map (a command, a volume, a label) still rolls the pool. Absent for admin-API templates.
   */
  /** Lifecycle hooks of every sandbox of this template (schema/api/hooks.ts). */
  lifecycle: Lifecycle.optional(),
  /**
   * The identity of the root filesystem `image` names where the pool runs (local driver: its
   * layer ids, `RootfsStore.rootfsId`), as the publisher saw it. Drivers do not read it (they
   * resolve `image` at every create); it is part of the revision, so re-putting the template
   * once a new build is there rolls the unclaimed members onto it (`npm start` does, for `base`).
   */
  rootfsId: z.string().regex(/^[a-z0-9][a-z0-9.-]{0,255}$/, "rootfsId is [a-z0-9.-], at most 256").optional(),
  sourceRevision: z.string().regex(/^[a-z0-9]{1,64}$/, "sourceRevision is [a-z0-9], at most 64").optional(),
  /** A built template's start and ready commands (E2B setStartCmd/setReadyCmd): every sandbox
   * of it starts the one and is ready once the other passes (controllers/agent/start-commands.ts). */
  startCmd: z.string().max(MAX_PATH_LENGTH).optional(),
  readyCmd: z.string().max(MAX_PATH_LENGTH).optional(),
  /** The template has the code interpreter's kernels (the `code-interpreter` templates): the
   * runtime serves port 49999 of its sandboxes (E2B's code interpreter API); in any other
   * sandbox 49999 is a user port like the rest. */
  codeInterpreter: z.boolean().optional(),
  /** Sandboxes of this template may make user namespaces of their own (`unshare --user`,
   * Chromium's namespace sandbox, rootless podman, bwrap inside): the local driver's seccomp
   * filter refuses them otherwise, since inside one any user gets every capability back over the
   * kernel code a namespace's root may drive (nf_tables, tc, overlayfs). The operator's to set,
   * like Kubernetes' `seccompProfile: Unconfined` behind Pod Security Admission: only the admin
   * API takes it; a build keeps it on a template it rebuilds and never gives it to a template
   * built `fromTemplate` one that has it (controllers/drivers/local/README.md, "Seccomp"). */
  nestedUserNamespaces: z.boolean().optional(),
});
export type TemplateSpec = z.infer<typeof TemplateSpec>;

/** Admin `PUT /admin/teams/{team}/templates/{id}` body. */
export const TemplateUpsert = z.strictObject({ public: z.boolean().default(false), spec: TemplateSpec.default(TemplateSpec.parse({})) });
/** Admin `POST /admin/teams/{team}/templates/{id}/scale` body. */
export const TemplateScale = z.strictObject({ replicas: z.int().min(0).max(100_000) });

/** A stored template as the store hands it to routes and DOs. */
export interface TemplateRecord {
  teamId: string;
  templateId: string;
  public: boolean;
  spec: TemplateSpec;
  revision: string;
  createdAt: number;
  updatedAt: number;
}

/** E2B `Template` (GET /templates). */
export const Template = z.object({
  templateID: z.string(),
  buildID: z.string(),
  cpuCount: z.int(),
  memoryMB: z.int(),
  diskSizeMB: z.int(),
  public: z.boolean(),
  aliases: z.array(z.string()),
  names: z.array(z.string()),
  createdAt: z.string(),
  updatedAt: z.string(),
  createdBy: z.null(),
  lastSpawnedAt: z.string().nullable(),
  spawnCount: z.int(),
  buildCount: z.int(),
  envdVersion: z.string(),
  buildStatus: z.enum(["building", "waiting", "ready", "error"]),
});

/** E2B `TemplateWithBuilds` (GET /templates/{id}). */
export const TemplateWithBuilds = z.object({
  templateID: z.string(),
  public: z.boolean(),
  aliases: z.array(z.string()),
  names: z.array(z.string()),
  createdAt: z.string(),
  updatedAt: z.string(),
  lastSpawnedAt: z.string().nullable(),
  spawnCount: z.int(),
  builds: z.array(
    z.object({
      buildID: z.string(),
      status: z.enum(["building", "waiting", "ready", "error"]),
      createdAt: z.string(),
      updatedAt: z.string(),
      finishedAt: z.string().optional(),
      cpuCount: z.int(),
      memoryMB: z.int(),
      diskSizeMB: z.int(),
      envdVersion: z.string(),
    }),
  ),
});

/** The spec's opt-in flags: `false` means what absent means. */
const OPT_IN_FLAGS = ["codeInterpreter", "nestedUserNamespaces"] as const satisfies readonly (keyof TemplateSpec)[];

/** Fields of the spec that change what a member is; replicas, strategies, hooks, restCpu and initCpu
 * (counts derived from the pod template, which sourceRevision covers) do not, nor
 * an opt-in flag set to `false` (the same members as without it: re-putting a template with an
 * explicit `false` must not roll its warm pool). */
export function templateRevision(spec: TemplateSpec): string {
  const { replicas: _r, scaleStrategy: _s, updateStrategy: _u, lifecycle: _l, restCpu: _rc, initCpu: _ic, ...shape } = spec;
  for (const flag of OPT_IN_FLAGS) if (shape[flag] === false) delete shape[flag];
  return fnv32(canonicalJson(shape));
}

function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(",")}]`;
  if (v && typeof v === "object") {
    const entries = Object.entries(v).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, x]) => `${JSON.stringify(k)}:${canonicalJson(x)}`).join(",")}}`;
  }
  return JSON.stringify(v);
}

/** FNV-1a 32-bit, hex; OpenKruise hashes SandboxSet revisions with FNV-32 too. */
function fnv32(s: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h.toString(16).padStart(8, "0");
}
