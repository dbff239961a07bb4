// E2B REST shapes for sandboxes (upstream openapi.yml `NewSandbox`, `Sandbox`, `SandboxDetail`,
// `ListedSandbox`, ...; the v2 create/connect shapes from the e2b 2.51 SDK types).
import { z } from "zod";
import { policyErrors } from "../egress/rules.ts";
import { transformErrors, type TransformRules } from "../egress/transforms.ts";
import {
  MAX_EGRESS_RULE_LENGTH,
  MAX_EGRESS_RULES,
  MAX_ENV_NAME_LENGTH,
  MAX_ENV_VALUE_LENGTH,
  MAX_ENV_VARS,
  MAX_LIST_ITEMS,
  MAX_METADATA_ENTRIES,
  MAX_METADATA_KEY_BYTES,
  MAX_METADATA_VALUE_BYTES,
  MAX_NAME_LENGTH,
  MAX_PATH_LENGTH,
  MAX_TIMEOUT_S,
} from "./limits.ts";

const timeoutSeconds = z.int().min(0).max(MAX_TIMEOUT_S);

/** A record of tenant entries, refusing the key `__proto__`: JSON.parse makes it an own key, but
 * zod's record skips it (assigning it would set the prototype), so the entry would vanish behind a
 * 2xx. Every tenant record (metadata, env vars, secrets' metadata, headers) is built here. */
export function tenantRecord<K extends z.core.$ZodRecordKey, V extends z.ZodType>(key: K, value: V) {
  const proto = (input: unknown) => typeof input === "object" && input !== null && Object.hasOwn(input, "__proto__");
  return z.preprocess((input, ctx) => {
    if (proto(input)) ctx.addIssue({ code: "custom", message: "the key __proto__ is not allowed", input });
    return input;
  }, z.record(key, value));
}

export const SandboxMetadata = boundedRecord(z.string().min(1).max(MAX_METADATA_KEY_BYTES), z.string().max(MAX_METADATA_VALUE_BYTES), MAX_METADATA_ENTRIES, "metadata entries");
export type SandboxMetadata = z.infer<typeof SandboxMetadata>;

/** A map bounded in entries, with a message naming the bound. */
export function boundedRecord<V extends z.ZodType>(key: z.ZodString, value: V, max: number, what: string) {
  return tenantRecord(key, value).refine((m) => Object.keys(m).length <= max, `at most ${max} ${what}`);
}

const name = z.string().min(1).max(MAX_NAME_LENGTH);

export const EnvVars = boundedRecord(
  z.string().max(MAX_ENV_NAME_LENGTH).regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "env var names are [A-Za-z_][A-Za-z0-9_]*"),
  z.string().max(MAX_ENV_VALUE_LENGTH),
  MAX_ENV_VARS,
  "env vars",
);

export const SandboxVolumeMount = z.object({
  name,
  path: z.string().max(MAX_PATH_LENGTH).regex(/^\/(?!.*\/\/)(?!.*\/\.\.?(\/|$)).*[^/]$|^\/$/, "path must be absolute and clean"),
});

const egressRules = z.array(z.string().min(1).max(MAX_EGRESS_RULE_LENGTH)).max(MAX_EGRESS_RULES).optional();
const headerRule = z.object({ transform: z.object({ headers: boundedRecord(name, z.string().max(MAX_PATH_LENGTH), MAX_LIST_ITEMS, "headers").optional() }).optional() });

const egressFields = {
  allowOut: egressRules,
  denyOut: egressRules,
  egressProxy: z
    .object({ address: z.string().min(1).max(MAX_NAME_LENGTH), username: z.string().max(255).optional(), password: z.string().max(255).optional() })
    .nullable()
    .optional(),
  rules: boundedRecord(name, z.array(headerRule).max(MAX_LIST_ITEMS), MAX_LIST_ITEMS, "rules").optional(),
  dnsServers: z.array(z.string().min(1).max(64)).max(16).optional(),
};

/** Bad allowOut/denyOut entries are refused here rather than by the traffic-proxy later, which
 * would deny everything and name the entry only in its 403s. */
function refineEgress(n: { allowOut?: string[]; denyOut?: string[]; rules?: TransformRules }, ctx: z.RefinementCtx): void {
  for (const message of policyErrors({ allowOut: n.allowOut ?? [], denyOut: n.denyOut ?? [] })) ctx.addIssue({ code: "custom", message });
  for (const message of transformErrors(n.rules ?? {})) ctx.addIssue({ code: "custom", message });
}

export const SandboxNetworkConfig = z
  .object({
    ...egressFields,
    allowPublicTraffic: z.boolean().optional(),
    // The Host header user ports receive (`${PORT}` becomes the port): a host[:port], nothing that
    // could split or extend the request head.
    maskRequestHost: z
      .string()
      .max(MAX_NAME_LENGTH)
      .regex(/^(?:[A-Za-z0-9._~:[\]-]|\$\{PORT\})+$/, 'maskRequestHost must be a host[:port], optionally with "${PORT}"')
      .optional(),
    httpsPorts: z.array(z.int().min(1).max(65535)).max(MAX_LIST_ITEMS).optional(),
  })
  .superRefine(refineEgress);
export type SandboxNetworkConfig = z.infer<typeof SandboxNetworkConfig>;

/** `PUT /sandboxes/{id}/network`: replaces the egress rules; an omitted field clears it. */
export const SandboxNetworkUpdateConfig = z
  .object({ ...egressFields, allow_internet_access: z.boolean().optional() })
  .superRefine(refineEgress);
export type SandboxNetworkUpdateConfig = z.infer<typeof SandboxNetworkUpdateConfig>;

/** The parts of a create or network update this server accepts in shape but does not enforce
 * yet (a 501 names them), rather than storing them as if they applied. */
export function unsupportedNetworkFields(
  n: { egressProxy?: unknown; httpsPorts?: number[]; dnsServers?: string[] } | undefined,
): string[] {
  const out: string[] = [];
  if (n?.egressProxy) out.push("network.egressProxy");
  if (n?.httpsPorts?.length) out.push("network.httpsPorts");
  // Names are resolved by the egress proxy; there is no DNS server a sandbox with rules can reach.
  if (n?.dnsServers?.length) out.push("network.dnsServers");
  return out;
}

const newSandboxFields = {
  templateID: name,
  metadata: SandboxMetadata.optional(),
  envVars: EnvVars.optional(),
  mcp: boundedRecord(name, z.unknown(), MAX_LIST_ITEMS, "mcp servers").nullable().optional(),
  network: SandboxNetworkConfig.optional(),
  iam: z.unknown().optional(),
  allow_internet_access: z.boolean().optional(),
  autoPause: z.boolean().optional(),
  autoPauseMemory: z.boolean().optional(),
  autoResume: z.object({ enabled: z.boolean() }).optional(),
  volumeMounts: z.array(SandboxVolumeMount).max(MAX_LIST_ITEMS).optional(),
};

/** `POST /v2/sandboxes` (e2b ≥ 2.46). Omitted timeout means 300 s. */
export const NewSandboxV2 = z.object({ ...newSandboxFields, timeout: timeoutSeconds.optional() });
/** `POST /sandboxes` (v1, Python SDK and JS ≤ 2.45): adds `secure`. */
export const NewSandbox = z.object({ ...newSandboxFields, timeout: timeoutSeconds.optional(), secure: z.boolean().optional() });
export type NewSandbox = z.infer<typeof NewSandbox>;

/** `POST /v2/sandboxes/{id}/connect`; v1 requires `timeout` (the route applies that). */
export const ConnectSandbox = z.object({ timeout: timeoutSeconds.optional(), memory: z.boolean().optional() });
export const SandboxTimeoutRequest = z.object({ timeout: timeoutSeconds });
export const SandboxPauseRequest = z.object({ memory: z.boolean().optional() });
export const ResumedSandbox = z.object({ timeout: timeoutSeconds.optional(), autoPause: z.boolean().optional(), memory: z.boolean().optional() });
export const SandboxRefreshRequest = z.object({ duration: z.int().min(0).max(3600).optional() });

export const SandboxState = z.enum(["running", "paused"]);
export type SandboxState = z.infer<typeof SandboxState>;

/** Create / connect / resume response. */
export const Sandbox = z.object({
  templateID: z.string(),
  sandboxID: z.string(),
  alias: z.string().optional(),
  clientID: z.string(),
  envdVersion: z.string(),
  envdAccessToken: z.string().optional(),
  trafficAccessToken: z.string().nullable().optional(),
  domain: z.string().nullable().optional(),
  /** OpenKruise adds it; here only with `return-sandbox-ip`, which puts the address in it. */
  metadata: z.record(z.string(), z.string()).optional(),
});
export type Sandbox = z.infer<typeof Sandbox>;

export const SandboxLifecycle = z.object({ autoResume: z.boolean(), onTimeout: z.enum(["kill", "pause"]) });

const listedFields = {
  templateID: z.string(),
  alias: z.string().optional(),
  sandboxID: z.string(),
  clientID: z.string(),
  startedAt: z.string(),
  endAt: z.string(),
  cpuCount: z.int(),
  memoryMB: z.int(),
  diskSizeMB: z.int(),
  metadata: z.record(z.string(), z.string()).optional(),
  state: SandboxState,
  envdVersion: z.string(),
  volumeMounts: z.array(SandboxVolumeMount).optional(),
};

/** `GET /v2/sandboxes` and `GET /sandboxes` items. */
export const ListedSandbox = z.object(listedFields);
export type ListedSandbox = z.infer<typeof ListedSandbox>;

/** `GET /sandboxes/{id}`. */
export const SandboxDetail = z.object({
  ...listedFields,
  envdAccessToken: z.string().optional(),
  domain: z.string().nullable().optional(),
  allowInternetAccess: z.boolean().nullable().optional(),
  network: SandboxNetworkConfig.optional(),
  lifecycle: SandboxLifecycle.optional(),
});
export type SandboxDetail = z.infer<typeof SandboxDetail>;

/** `GET /v2/sandboxes` query after parsing (metadata decoded by functions/api/list-query.ts). */
export const ListSandboxesQuery = z.object({
  /** Deduplicated by the parser: at most one of each. */
  state: z.array(SandboxState).max(SandboxState.options.length).optional(),
  order: z.enum(["asc", "desc"]).default("desc"),
  startedAfter: z.iso.datetime({ offset: true }).optional(),
  template: name.optional(),
  limit: z.coerce.number().pipe(z.int().min(1).max(100)).default(100),
  nextToken: name.optional(),
});
