// The edge's OpenTelemetry traces, in workerd: @opentelemetry/sdk-trace with the OTLP/HTTP exporter's
// fetch transport (its browser build, which the Worker bundle resolves to). Off unless
// OTEL_EXPORTER_OTLP_ENDPOINT is set: then no provider exists and `edgeSpan` only calls its work.
// The current span travels in an AsyncLocalStorage through a request (and through a Durable
// Object's call); across a DO call or the agent link it travels as a W3C `traceparent`.
//
// Traced beyond the request: SandboxGroupDO calls (sandbox/stub.ts), TeamQuotaDO.claim and, from
// inside that object, PoolDO.claim (a create's claim), UpdateOpsDO.* (operations/update-ops.ts).
// A new step in a traced path is one line:
//   await edgeSpan(env, "SnapshotDO.create", { "sandbox.id": id }, () => work());
import { AsyncLocalStorage } from "node:async_hooks";
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type Context, type Span } from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { TracerProvider, type ReadableSpan, type SpanExporter, type SpanProcessor } from "@opentelemetry/sdk-trace";

export const EDGE_SCOPE = "sandbox-edge";
const propagator = new W3CTraceContextPropagator();
/** The current request's id (its trace id) and, when traced, the current span's context. */
const current = new AsyncLocalStorage<{ id: string; ctx: Context | null }>();
let provider: TracerProvider | null = null;
let providerFor: string | null = null;
let edgeTracer: ReturnType<TracerProvider["getTracer"]> | null = null;

/**
 * Holds ended spans until `flushEdgeTraces` exports them: workerd drops a request's timers when it
 * ends, so the SDK's BatchSpanProcessor timer cannot be relied on here, and arming it cost a timer
 * per span. At most MAX_BUFFERED spans wait (more are dropped, as the batch processor drops past
 * its queue); each export request carries at most EXPORT_BATCH.
 */
const MAX_BUFFERED = 8192;
const EXPORT_BATCH = 1024;
class FlushedSpanProcessor implements SpanProcessor {
  private spans: ReadableSpan[] = [];
  private readonly exporter: SpanExporter;
  constructor(exporter: SpanExporter) {
    this.exporter = exporter;
  }
  onStart(): void {}
  onEnd(span: ReadableSpan): void {
    if (this.spans.length < MAX_BUFFERED) this.spans.push(span);
  }
  async forceFlush(): Promise<void> {
    const all = this.spans;
    this.spans = [];
    for (let i = 0; i < all.length; i += EXPORT_BATCH) await new Promise<void>((done) => this.exporter.export(all.slice(i, i + EXPORT_BATCH), () => done()));
  }
  async shutdown(): Promise<void> {
    await this.forceFlush();
    await this.exporter.shutdown();
  }
}

interface TracingEnv {
  OTEL_EXPORTER_OTLP_ENDPOINT?: string;
}

/** The isolate's provider for this endpoint (null: tracing off). */
function tracer(env: TracingEnv) {
  const endpoint = env.OTEL_EXPORTER_OTLP_ENDPOINT;
  if (!endpoint) return null;
  if (providerFor !== endpoint) {
    provider = new TracerProvider({
      resource: resourceFromAttributes({ "service.name": "sandbox-edge" }),
      spanProcessors: [new FlushedSpanProcessor(new OTLPTraceExporter({ url: `${endpoint.replace(/\/$/, "")}/v1/traces` }))],
    });
    providerFor = endpoint;
    edgeTracer = provider.getTracer(EDGE_SCOPE);
  }
  return edgeTracer!;
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

function contextOf(traceparent: string | undefined): Context {
  if (!traceparent) return current.getStore()?.ctx ?? ROOT_CONTEXT;
  return propagator.extract(ROOT_CONTEXT, { traceparent }, { get: (c, k) => c[k], keys: (c) => Object.keys(c) });
}

/** The traceparent of the current span (undefined when none records). */
export function currentTraceparent(): string | undefined {
  const ctx = current.getStore()?.ctx;
  if (!ctx || !trace.getSpan(ctx)?.isRecording()) return undefined;
  const carrier: Record<string, string> = {};
  propagator.inject(ctx, carrier, { set: (c, k, v) => (c[k] = v) });
  return carrier.traceparent;
}

/** Adds attributes known only once the work ran (a decision, a verdict) to the current span. */
export function annotateSpan(attributes: Attributes): void {
  const ctx = current.getStore()?.ctx;
  if (ctx) trace.getSpan(ctx)?.setAttributes(attributes);
}

/**
 * Runs `work` in a span named `name`: a child of `parent` (a traceparent from another object or
 * hop) or of the current span. With tracing off it only runs `work`.
 */
export async function edgeSpan<T>(env: TracingEnv, name: string, attributes: Attributes, work: () => Promise<T>, parent?: string, kind = SpanKind.INTERNAL): Promise<T> {
  const t = tracer(env);
  if (!t) return work();
  const span = t.startSpan(name, { attributes, kind }, contextOf(parent));
  try {
    return await current.run({ id: span.spanContext().traceId, ctx: trace.setSpan(ROOT_CONTEXT, span) }, work);
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
  const valid = traceparent && /^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/.test(traceparent) && !/^00-0{32}/.test(traceparent) ? traceparent : undefined;
  const t = tracer(env);
  if (!t) {
    const id = valid ? valid.slice(3, 35) : randomTraceId();
    return { id, span: null, run: (work) => current.run({ id, ctx: null }, work) };
  }
  const span = t.startSpan(name, { kind: SpanKind.SERVER }, valid ? contextOf(valid) : ROOT_CONTEXT);
  const scope = { id: span.spanContext().traceId, ctx: trace.setSpan(ROOT_CONTEXT, span) };
  return { id: scope.id, span, run: (work) => current.run(scope, work) };
}

function randomTraceId(): string {
  const b = crypto.getRandomValues(new Uint8Array(16));
  let s = "";
  for (const x of b) s += x.toString(16).padStart(2, "0");
  return s;
}
