import { z } from "zod";

/**
 * A pod runtime's spans, collected by its agent (issue 15.1): the runtime keeps the spans of the
 * requests it served and answers them at RUNTIME_SPANS_PATH to a request carrying the sandbox's own
 * access token; the agent pulls them over the connection it opens to the pod (its ingress's way in,
 * so a governed pod, whose own connections out go to its traffic-proxy, needs no exemption), checks
 * them with these schemas and forwards to its collector only those whose parent is an `ingress`
 * span it handed that sandbox (controllers/agent/pod-spans.ts). Everything here is written by a
 * process the tenant's code shares a container with (as root): data, bounded, never trusted for
 * who it is about — the agent names the sandbox and the service, not the payload.
 */
import { MAX_RUNTIME_SPAN_ATTRIBUTES, MAX_RUNTIME_SPANS } from "./runtime-spans-limits.ts";

export * from "./runtime-spans-limits.ts";

const hex = (n: number) => z.string().regex(new RegExp(`^[0-9a-f]{${n}}$`));
const ms = z.number().int().nonnegative().max(8.64e15);

export const RuntimeSpanSchema = z.strictObject({
  traceId: hex(32),
  spanId: hex(16),
  parentSpanId: hex(16),
  name: z.string().min(1).max(128),
  startMs: ms,
  endMs: ms,
  /** OpenTelemetry's SpanStatusCode: 0 unset, 1 ok, 2 error. */
  status: z.number().int().min(0).max(2),
  attributes: z
    .record(z.string().min(1).max(64), z.union([z.string().max(256), z.number(), z.boolean()]))
    .refine((a) => Object.keys(a).length <= MAX_RUNTIME_SPAN_ATTRIBUTES, `at most ${MAX_RUNTIME_SPAN_ATTRIBUTES} attributes`),
});
export type RuntimeSpan = z.infer<typeof RuntimeSpanSchema>;

export const RuntimeSpansSchema = z.strictObject({
  spans: z.array(RuntimeSpanSchema).max(MAX_RUNTIME_SPANS),
  /** Spans the runtime did not keep (its buffer was full between two pulls). */
  dropped: z.number().int().nonnegative(),
});
export type RuntimeSpans = z.infer<typeof RuntimeSpansSchema>;
