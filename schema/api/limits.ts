// Bounds of the control-plane surface, one place for every knob a client can hit.

/** Default sandbox lifetime (s) for v2 create, connect and the resume floor. */
export const DEFAULT_TIMEOUT_S = 300;
/** v1 `NewSandbox`/`ResumedSandbox` default when `timeout` is omitted (upstream spec). */
export const V1_DEFAULT_TIMEOUT_S = 15;
/** Longest lifetime a client may ask for: 30 days, as OpenKruise's `--e2b-max-timeout`. */
export const MAX_TIMEOUT_S = 2_592_000;
/** Connect/resume on a paused sandbox never grants less than this (OpenKruise min-resume-timeout). */
export const MIN_RESUME_TIMEOUT_S = 300;
/** Largest JSON body a control-plane route reads; bigger ones are 413. */
export const MAX_BODY_BYTES = 256 * 1024;
/** Metadata: entries per sandbox and bytes per key / value. */
export const MAX_METADATA_ENTRIES = 64;
export const MAX_METADATA_KEY_BYTES = 256;
export const MAX_METADATA_VALUE_BYTES = 4096;
/** envVars (and a template's env): entries, name and value sizes. */
export const MAX_ENV_VARS = 256;
export const MAX_ENV_NAME_LENGTH = 256;
export const MAX_ENV_VALUE_LENGTH = 32 * 1024;
/** A template's final config (user, workdir, env) as JSON, in bytes. The counts above bound
 * characters, not bytes (a control character is 6 as JSON): 256 full values could make ~50 MB, and
 * `fromTemplate` chains of ENV-only builds add up to that. The build's result carries the config in
 * one agent-link item that cannot be split, past workerd's 32 MiB per message the edge's runtime
 * closes the cluster's whole session; 1 MiB leaves every frame room and holds any real env. */
export const MAX_TEMPLATE_CONFIG_BYTES = 1024 * 1024;
/** `metadata` filter of the list routes: pairs (each bounded like metadata) and the raw parameter.
 * Each pair is a subquery; thousands of them overflowed SQLite's expression tree (a 500). */
export const MAX_METADATA_FILTERS = MAX_METADATA_ENTRIES;
export const MAX_METADATA_QUERY_LENGTH = 64 * 1024;
/** Network rules: entries per list, and the length of one (a CIDR, address or domain name). */
export const MAX_EGRESS_RULES = 100;
export const MAX_EGRESS_RULE_LENGTH = 256;
/** Any other list or map in a request (volume mounts, ports, header rules, mcp servers). */
export const MAX_LIST_ITEMS = 64;
/** Any other free-form string in a request (names, hosts, images, cursors). */
export const MAX_NAME_LENGTH = 256;
export const MAX_PATH_LENGTH = 4096;
/** Agent link frames (schema/protocol): items of one CRD frame (the agent sends one), sandboxes of
 * one hello inventory or observation/ack batch (a cluster's whole fleet), and the reason/message
 * strings a reply carries. */
export const MAX_CRD_FRAME_ITEMS = MAX_LIST_ITEMS;
export const MAX_FRAME_SANDBOXES = 100_000;
/** Sandboxes of one hello's inventory over all its frames (a hello and its `inventory` frames):
 * what ClusterDO holds in memory until the last one comes. */
export const MAX_INVENTORY_SANDBOXES = 10 * MAX_FRAME_SANDBOXES;
export const MAX_MESSAGE_LENGTH = 4096;
/** List page size bounds. */
export const MAX_LIST_LIMIT = 100;
/** envd version reported for sandboxes; ≥ 0.6.4 unlocks every SDK feature gate. */
export const DEFAULT_ENVD_VERSION = "0.6.4";

/** Text cut to `max` characters (the last one an ellipsis), for error text whose length nobody
 * controls (an API server's, a driver's) sent where a bound applies. */
export function clipText(s: string, max: number): string {
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}
/** A template's CPU (cores) and memory (MiB): the edge's TemplateSpec and build bounds, and what a
 * SandboxSet's whole pod may sum to (sandboxset-sync.ts refuses more as uncountable). */
export const MAX_TEMPLATE_CPU_COUNT = 256;
export const MAX_TEMPLATE_MEMORY_MB = 1_048_576;
