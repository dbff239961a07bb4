import { z } from "zod";
import { SandboxIdSchema, SnapshotIdSchema } from "./ids.ts";
import { EgressPolicySchema } from "./egress.ts";

/**
 * Who owns a sandbox on the edge, i.e. which Durable Object receives its observations: the pool
 * while it is an unclaimed warm member, the sandbox's SandboxGroupDO once claimed or created on demand, the
 * cluster itself for orphans it is cleaning up.
 */
export const OwnerSchema = z.discriminatedUnion("kind", [
  z.object({ kind: z.literal("pool"), id: z.string().min(1) }),
  z.object({ kind: z.literal("sandbox") }),
  z.object({ kind: z.literal("cluster") }),
]);
export type Owner = z.infer<typeof OwnerSchema>;

export const PauseStrategySchema = z.enum(["Freeze", "Stop"]);
export type PauseStrategy = z.infer<typeof PauseStrategySchema>;

export const DesiredStateSchema = z.enum(["running", "paused", "deleted"]);
export type DesiredState = z.infer<typeof DesiredStateSchema>;

/** What the sandbox should run: the template at one revision (part of a SandboxSet spec). */
export const TemplateSpecSchema = z.object({
  id: z.string().min(1),
  /** Opaque revision (hash of the spec); a pool prefers members of its current revision. */
  revision: z.string().min(1),
  /** Container image (kubernetes driver) or root filesystem name (local driver). */
  image: z.string().min(1).default("base"),
  user: z.string().min(1).default("user"),
  workdir: z.string().min(1).default("/home/user"),
  resources: z
    .object({
      cpuCount: z.number().positive().default(1),
      memoryMB: z.number().int().positive().default(512),
      diskSizeMB: z.number().int().positive().optional(),
    })
    .prefault({}),
  /** A built template's start command (E2B setStartCmd), started in every sandbox of it. */
  startCmd: z.string().max(4096).optional(),
  /** Polled until it exits 0 before the sandbox is ready (E2B setReadyCmd). */
  readyCmd: z.string().max(4096).optional(),
  /** The runtime serves port 49999 (the code interpreter) for it; otherwise 49999 is a user port. */
  codeInterpreter: z.boolean().optional(),
  /** Its sandboxes may make user namespaces of their own (schema/api/template.ts): the local
   * driver loads its filter without the rules that refuse them. */
  nestedUserNamespaces: z.boolean().optional(),
});
export type TemplateSpec = z.infer<typeof TemplateSpecSchema>;

/**
 * A claim's change of a running warm member in place (SandboxClaim `inplaceUpdate`; E2B create
 * metadata `e2b.agents.kruise.io/image` and `cpu-limit`): the main container's image and CPU.
 */
export const InplaceUpdateSchema = z.object({
  image: z.string().min(1).optional(),
  cpuCount: z.number().positive().optional(),
});
export type InplaceUpdate = z.infer<typeof InplaceUpdateSchema>;

/** E2B `network.rules`: header transforms per host pattern, secrets as placeholders only. */
export const NetworkRulesSchema = z.record(z.string(), z.array(z.object({ transform: z.object({ headers: z.record(z.string(), z.string()).optional() }).optional() })));

/**
 * Desired state for one sandbox at one generation. The agent is level-based: it keeps only the
 * newest generation per sandbox, ignores an intent whose generation is not newer than the one it
 * applied, and converges the sandbox to `desired`. So a redelivered or duplicated intent is harmless.
 */
export const IntentSchema = z
  .object({
    sandboxId: SandboxIdSchema,
    /** Strictly increasing per sandbox across owners (pool members start at 1; a claim bumps it). */
    generation: z.number().int().nonnegative(),
    owner: OwnerSchema,
    desired: z.object({
      state: DesiredStateSchema,
      pauseStrategy: PauseStrategySchema.default("Freeze"),
    }),
    /** Required unless `desired.state` is `deleted` (orphan clean-up does not know it). */
    template: TemplateSpecSchema.nullable().default(null),
    envVars: z.record(z.string(), z.string()).default({}),
    /** The runtime's `X-Access-Token`; null for warm members until claimed (runtime re-init). */
    envdAccessToken: z.string().nullable().default(null),
    allowInternetAccess: z.boolean().default(true),
    labels: z.record(z.string(), z.string()).default({}),
    /** Annotations for the sandbox's cluster objects (a SandboxClaim's `annotations`). */
    annotations: z.record(z.string(), z.string()).default({}),
    /** Egress rules to enforce; null when the sandbox has none (unrestricted, or no network). */
    egress: EgressPolicySchema.nullable().default(null),
    /** E2B `network.rules` as the client wrote them (header transforms, secrets as
     * `${e2b.secrets.<name>}` placeholders only): enforced by the proxy's L7 handler. The values
     * travel beside the intent (the `intents` frame's `secrets`), never in it, as intents are
     * persisted on both ends. */
    networkRules: NetworkRulesSchema.default({}),
    /** The owning team's name, which is the Kubernetes namespace the sandbox's objects live in
     * (null: the driver's own namespace). */
    team: z.string().min(1).nullable().default(null),
    /** Set on a claimed member's intents when the claim changes it in place (drivers that can). */
    inplaceUpdate: InplaceUpdateSchema.optional(),
    /** Take this snapshot of the sandbox's private state while applying this generation (the
     * sandbox frozen for the copy, then as `desired` says); acked once it is taken, `rejected`
     * with the reason when it cannot be. Only the generation that asks carries it. */
    snapshot: z.object({ id: SnapshotIdSchema }).optional(),
    /** Create the sandbox's private state as a copy of this snapshot (used when it is first made;
     * every intent of a sandbox made from a snapshot carries it, so a lost sandbox is remade so). */
    restoreFrom: z.object({ id: SnapshotIdSchema }).optional(),
    /** An update ops run's CheckpointRestore: as the upgrade recreates the sandbox, its private
     * state is replaced by this snapshot's (once per id). Carried until the upgrade is done. */
    restoreFs: z.object({ id: SnapshotIdSchema }).optional(),
    /** Edge clock, ms since the epoch, when the owner issued it (diagnostics only). */
    issuedAt: z.number().int().nonnegative(),
  })
  .refine((i) => i.desired.state === "deleted" || i.template !== null, {
    message: "template is required unless desired.state is deleted",
    path: ["template"],
  });
/** An intent as it travels (defaults applied). */
export type Intent = z.infer<typeof IntentSchema>;
/** An intent as an owner may write it (defaults optional). */
export type IntentInput = z.input<typeof IntentSchema>;
