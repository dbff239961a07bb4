import { z } from "zod";
import { clipText, MAX_LIST_ITEMS, MAX_MESSAGE_LENGTH, MAX_NAME_LENGTH, MAX_PATH_LENGTH } from "../api/limits.ts";
import { SandboxIdSchema } from "./ids.ts";

/**
 * What the agent sees of one sandbox. `Deleted` means gone (destroyed, or never existed on this
 * cluster); `Failed` is terminal until a newer intent arrives, and only a terminal error makes it:
 * a failure the agent retries keeps the phase and says so in a `Ready` condition.
 */
export const ObservedPhaseSchema = z.enum([
  "Pending",
  "Running",
  "Pausing",
  "Paused",
  "Resuming",
  "Terminating",
  "Deleted",
  "Failed",
]);
export type ObservedPhase = z.infer<typeof ObservedPhaseSchema>;

/**
 * How the cluster ingress (the agent) reaches the sandbox's runtime (envd port 49983 and user
 * ports). The edge never dials it directly: it hands it back to the ingress in signed requests.
 */
export const EndpointSchema = z.object({
  /** Base URL of the runtime as the ingress sees it, e.g. `http://10.0.0.7:49983` or `unix:/run/sbx/x.sock`. */
  runtime: z.string().min(1).max(MAX_PATH_LENGTH),
  /** Host the ingress uses for user ports (`{port}-{id}` routing); omitted when same as runtime's. */
  host: z.string().min(1).max(MAX_NAME_LENGTH).optional(),
});
export type Endpoint = z.infer<typeof EndpointSchema>;

/**
 * A Kubernetes-style condition the agent computed for the sandbox, with CamelCase reasons:
 * `Ready` False with reason `ReconcileError` while the agent retries a failure (message: the
 * error, the attempt and the delay before the next; the edge mirrors it, the phase stays), or
 * with a terminal error's reason beside phase Failed; lifecycle hook and probe results (e.g.
 * `PostStartHook`, `ReadinessProbe`, `RuntimeInit`).
 */
export const ObservedConditionSchema = z.object({
  type: z.string().min(1).max(MAX_NAME_LENGTH),
  status: z.enum(["True", "False", "Unknown"]),
  reason: z.string().max(MAX_NAME_LENGTH).optional(),
  message: z.string().max(MAX_MESSAGE_LENGTH).optional(),
  /** Agent clock, ms since the epoch. */
  lastTransitionTime: z.number().int().nonnegative().optional(),
});
export type ObservedCondition = z.infer<typeof ObservedConditionSchema>;

export const ObservationSchema = z.object({
  sandboxId: SandboxIdSchema,
  /** The generation of the intent the agent last applied for this sandbox (observedGeneration). */
  generation: z.number().int().nonnegative(),
  phase: ObservedPhaseSchema,
  /** Runtime answers its health check and has been (re-)initialised for this generation. */
  ready: z.boolean(),
  endpoint: EndpointSchema.nullable().default(null),
  /** Machine-readable CamelCase reason (e.g. `ImagePullFailed`, `OOMKilled`), and a message. */
  reason: z.string().max(MAX_NAME_LENGTH).optional(),
  message: z.string().max(MAX_MESSAGE_LENGTH).optional(),
  /** The sandbox's own IP address (a pod IP; a local sandbox's address on the bridge), for
   * OpenKruise's `return-sandbox-ip`. */
  address: z.string().min(1).max(MAX_NAME_LENGTH).optional(),
  /** Template revision the sandbox actually runs (lets the pool count updated members). */
  revision: z.string().max(MAX_NAME_LENGTH).optional(),
  /** Agent clock, ms since the epoch. */
  observedAt: z.number().int().nonnegative(),
  startedAt: z.number().int().nonnegative().optional(),
  conditions: z.array(ObservedConditionSchema).max(MAX_LIST_ITEMS).optional(),
});
export type Observation = z.infer<typeof ObservationSchema>;
export type ObservationInput = z.input<typeof ObservationSchema>;

/**
 * The observation cut to the schema's bounds. Reasons and messages carry error text (an API
 * server's, a driver's), whose length nobody controls; the agent cuts it before sending, so one
 * long error cannot make its frame refused (which would close the session).
 */
export function boundedObservation<T extends ObservationInput>(o: T): T {
  const out: T = { ...o };
  if (o.reason !== undefined) out.reason = clipText(o.reason, MAX_NAME_LENGTH);
  if (o.message !== undefined) out.message = clipText(o.message, MAX_MESSAGE_LENGTH);
  if (o.revision !== undefined) out.revision = clipText(o.revision, MAX_NAME_LENGTH);
  if (o.conditions) {
    out.conditions = o.conditions.slice(0, MAX_LIST_ITEMS).map((c) => ({
      ...c,
      type: clipText(c.type, MAX_NAME_LENGTH),
      ...(c.reason !== undefined ? { reason: clipText(c.reason, MAX_NAME_LENGTH) } : {}),
      ...(c.message !== undefined ? { message: clipText(c.message, MAX_MESSAGE_LENGTH) } : {}),
    }));
  }
  return out;
}
