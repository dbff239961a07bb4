// The edge's OpenTelemetry traces, in workerd: spans of our own recorder (span-recorder.ts: the
// API's Span, the SDK's ReadableSpan, none of the SDK's per-span machinery), each encoded as
// OTLP/JSON when it ends (lib/tracing/otlp-json.ts: the transformer's encoding, field for field)
// and exported by OTLP/HTTP with the OTLP exporter's retry rules (`postOtlp`).
// Off unless OTEL_EXPORTER_OTLP_ENDPOINT is set: then no sink exists and `edgeSpan` only calls its
// work, but the request id still travels (a traceparent naming no recorded span: see
// `currentTraceparent`), so the agent's log lines for the work a request caused carry its id.
// The current span travels in an AsyncLocalStorage through a request (and through a Durable
// Object's call); across a DO call or the agent link it travels as a W3C `traceparent`.
//
// Traced beyond the request: SandboxGroupDO calls (sandbox/stub.ts), TeamQuotaDO.claim and, from
// inside that object, PoolDO.claim (a create's claim), UpdateOpsDO.* (operations/update-ops.ts).
// A new step in a traced path is one line:
//   await edgeSpan(env, "SnapshotDO.create", { "sandbox.id": id }, () => work());
import { AsyncLocalStorage } from "node:async_hooks";
import { SpanKind, SpanStatusCode, type Attributes, type Span } from "@opentelemetry/api";
import { resourceFromAttributes } from "@opentelemetry/resources";
import type { ReadableSpan } from "@opentelemetry/sdk-trace";
import { OTLP_REQUEST_TAIL, otlpRequestHead, otlpSpanJson } from "../../lib/tracing/otlp-json.ts";
import { EdgeSpan, parseTraceparent, randomHex, traceparentOf, type SpanSink } from "../../lib/tracing/span-recorder.ts";

export const EDGE_SCOPE = "sandbox-edge";
/**
 * The current request's id (its trace id) and, when traced, the current span. Untraced, the
 * traceparent handed on: the caller's (a DO call's, an incoming request's), else made on first use.
 */
const current = new AsyncLocalStorage<{ id: string; span: EdgeSpan | null; traceparent?: string }>();
let provider: FlushedSpanProcessor | null = null;
let providerFor: string | null = null;

/**
 * Holds ended spans, as their OTLP/JSON text, until `flushEdgeTraces` exports them: workerd drops
 * a request's timers when it ends, so the SDK's BatchSpanProcessor timer cannot be relied on here,
 * and arming it cost a timer per span. A span is encoded when it ends and only its text is kept
 * (the span objects die young; kept for up to a second, they and the transformer's tree per export
 * were about half of tracing's cost per create). At most MAX_BUFFERED spans wait (more are
 * dropped, as the batch processor drops past its queue); each export request carries at most
 * EXPORT_BATCH.
 */
const MAX_BUFFERED = 8192;
const EXPORT_BATCH = 1024;
class FlushedSpanProcessor implements SpanSink {
  readonly resource = resourceFromAttributes({ "service.name": "sandbox-edge" });
  readonly scope = { name: EDGE_SCOPE };
  private spans: string[] = [];
  private readonly head = otlpRequestHead(this.resource, this.scope);
  private readonly url: string;
  constructor(url: string) {
    this.url = url;
  }
  onEnd(span: ReadableSpan): void {
    if (this.spans.length < MAX_BUFFERED) this.spans.push(otlpSpanJson(span));
  }
  async forceFlush(): Promise<void> {
    const all = this.spans;
    this.spans = [];
    for (let i = 0; i < all.length; i += EXPORT_BATCH) await postOtlp(this.url, this.head + all.slice(i, i + EXPORT_BATCH).join(",") + OTLP_REQUEST_TAIL);
  }
}

/**
 * The OTLP exporter's rules for one export (@opentelemetry/otlp-exporter-base: its retrying
 * transport and is-export-retryable): within EXPORT_TIMEOUT_MS in all, a 429, 502, 503 or 504
 * answer or a network error is tried again up to MAX_RETRIES times, after the answer's
 * Retry-After or a backoff from 1 s growing 1.5× up to 5 s with ±20 % jitter; any other answer
 * ends it; at most MAX_EXPORTS exports at once (past that a batch is dropped, as the exporter's
 * concurrency limit does). The answer's body is not read (the exporter reads it to the end for a
 * browser's keepalive quota, which workerd has no part of).
 */
const EXPORT_TIMEOUT_MS = 10_000;
const MAX_RETRIES = 5;
const MAX_EXPORTS = 30;
let exporting = 0;
export async function postOtlp(url: string, body: string, fetchImpl: typeof fetch = fetch): Promise<"success" | "failure" | "retryable"> {
  if (exporting >= MAX_EXPORTS) return "failure";
  exporting++;
  try {
    const deadline = Date.now() + EXPORT_TIMEOUT_MS;
    let backoff = 1_000;
    for (let attempt = 0; ; attempt++) {
      let retryIn: number | undefined;
      try {
        const res = await fetchImpl(url, { method: "POST", headers: { "content-type": "application/json" }, body, signal: AbortSignal.timeout(Math.max(1, deadline - Date.now())) });
        void res.body?.cancel().catch(() => {});
        if (res.ok) return "success";
        if (![429, 502, 503, 504].includes(res.status)) return "failure";
        retryIn = retryAfterMs(res.headers.get("retry-after"));
      } catch (err) {
        // fetch's TypeError without a cause is a network error (the exporter retries those); a
        // timeout's abort is not retried.
        if (!(err instanceof TypeError) || err.cause) return "failure";
      }
      if (attempt >= MAX_RETRIES) return "retryable";
      const wait = retryIn ?? Math.min(backoff * (1 + (Math.random() * 0.4 - 0.2)), 5_000);
      backoff *= 1.5;
      if (wait > deadline - Date.now()) return "retryable";
      await new Promise((r) => setTimeout(r, wait));
    }
  } finally {
    exporting--;
  }
}

/** A Retry-After header in ms (seconds or an HTTP date), as the exporter reads it. */
function retryAfterMs(header: string | null): number | undefined {
  if (header == null) return undefined;
  const seconds = Number.parseInt(header, 10);
  if (Number.isInteger(seconds)) return seconds > 0 ? seconds * 1000 : -1;
  const at = new Date(header).getTime() - Date.now();
  return at >= 0 ? at : 0;
}

interface TracingEnv {
  OTEL_EXPORTER_OTLP_ENDPOINT?: string;
}

/** The isolate's span sink for this endpoint (null: tracing off). */
function tracer(env: TracingEnv): FlushedSpanProcessor | null {
  const endpoint = env.OTEL_EXPORTER_OTLP_ENDPOINT;
  if (!endpoint) return null;
  if (providerFor !== endpoint) {
    provider = new FlushedSpanProcessor(`${endpoint.replace(/\/$/, "")}/v1/traces`);
    providerFor = endpoint;
  }
  return provider;
}

/** How often the isolate exports what it buffered. */
const FLUSH_MS = 1_000;
let lastFlush = 0;
let pending: Promise<void> | null = null;

/**
 * The isolate's next export, at most one per FLUSH_MS, for `waitUntil` at the end of a request or
 * DO call: it takes every span ended until it runs, so each span is exported within about FLUSH_MS
 * (workerd drops a request's timers when it ends, so the batch timer cannot be relied on). Only the
 * caller that starts it gets it to hold (its timer lives in that caller's context); the others get
 * nothing to wait for, which spared a `waitUntil` per request (~0.5 % of the isolate's CPU).
 * An export per request cost ~40 % more workerd CPU per create.
 */
export function flushEdgeTraces(now = Date.now()): Promise<void> | undefined {
  if (!provider || pending) return undefined;
  const p = provider;
  const wait = Math.max(0, lastFlush + FLUSH_MS - now);
  pending = (wait ? new Promise<void>((r) => setTimeout(r, wait)) : Promise.resolve()).then(() => {
    lastFlush = Date.now();
    pending = null;
    return p.forceFlush();
  });
  return pending;
}

export function tracingOn(env: TracingEnv): boolean {
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT);
}

/** The trace id of the request or traced call this code runs in ("" outside one). */
export function currentTraceId(): string {
  return current.getStore()?.id ?? "";
}

/** The current span, or the one `traceparent` names when given. */
function parentOf(traceparent: string | undefined) {
  if (!traceparent) return current.getStore()?.span?.spanContext();
  return parseTraceparent(traceparent);
}

/**
 * The traceparent to hand the next hop (a DO call, an intent frame, an HTTP hop): the current
 * span's; untraced, one naming the request's id (the caller's traceparent as it came, else the id
 * with a fresh parent id, flagged sampled so a traced agent records its work under the request's
 * id as it did before as a trace of its own). Undefined outside a request or traced call.
 */
export function currentTraceparent(): string | undefined {
  const store = current.getStore();
  if (!store) return undefined;
  if (store.span) return traceparentOf(store.span.spanContext());
  return (store.traceparent ??= `00-${store.id}-${randomHex(16)}-01`);
}

/** Adds attributes known only once the work ran (a decision, a verdict) to the current span. */
export function annotateSpan(attributes: Attributes): void {
  current.getStore()?.span?.setAttributes(attributes);
}

/**
 * Runs `work` in a span named `name`: a child of `parent` (a traceparent from another object or
 * hop) or of the current span. With tracing off it only runs `work`.
 */
export async function edgeSpan<T>(env: TracingEnv, name: string, attributes: Attributes, work: () => Promise<T>, parent?: string, kind = SpanKind.INTERNAL): Promise<T> {
  const sink = tracer(env);
  // Off, a call handed a traceparent (another object's) keeps it for the hops it makes.
  if (!sink) return parent ? current.run({ id: parent.slice(3, 35), span: null, traceparent: parent }, work) : work();
  const span = new EdgeSpan(sink, name, kind, attributes, parentOf(parent));
  try {
    return await current.run({ id: span.spanContext().traceId, span }, work);
  } catch (err) {
    span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error)?.message ?? String(err) });
    throw err;
  } finally {
    span.end();
  }
}

/**
 * A request's server span, and its id: the trace id (from the caller's traceparent when it sent
 * one). With tracing off the id is the caller's trace id or a fresh random one, and no span exists.
 */
export function startRequestSpan(env: TracingEnv, name: string, traceparent: string | null): { id: string; span: Span | null; run<T>(work: () => Promise<T>): Promise<T> } {
  const caller = traceparent ? parseTraceparent(traceparent) : undefined;
  const sink = tracer(env);
  if (!sink) {
    const id = caller?.traceId ?? randomTraceId();
    const scope = { id, span: null, ...(caller ? { traceparent: traceparent! } : {}) };
    return { id, span: null, run: (work) => current.run(scope, work) };
  }
  const span = new EdgeSpan(sink, name, SpanKind.SERVER, undefined, caller);
  const scope = { id: span.spanContext().traceId, span };
  return { id: scope.id, span, run: (work) => current.run(scope, work) };
}

function randomTraceId(): string {
  return crypto.randomUUID().replaceAll("-", "");
}
