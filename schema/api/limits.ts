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
/** envVars: entries per sandbox. */
export const MAX_ENV_VARS = 256;
/** List page size bounds. */
export const MAX_LIST_LIMIT = 100;
/** envd version reported for sandboxes; ≥ 0.6.4 unlocks every SDK feature gate. */
export const DEFAULT_ENVD_VERSION = "0.6.4";
