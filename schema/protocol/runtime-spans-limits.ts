// The bounds of a pod runtime's spans (runtime-spans.ts), apart so the runtime's bundle takes
// them without zod.
export const RUNTIME_SPANS_PATH = "/agent/spans";
/** Spans a runtime keeps until pulled (more are counted in `dropped`), and a pull's limit. */
export const MAX_RUNTIME_SPANS = 256;
/** The largest answer the agent reads (more: the pull is abandoned, nothing forwarded). */
export const MAX_RUNTIME_SPANS_BYTES = 256 * 1024;
export const MAX_RUNTIME_SPAN_ATTRIBUTES = 16;

