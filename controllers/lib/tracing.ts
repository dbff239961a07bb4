// The agent's OpenTelemetry traces. Off by default: until `startTracing` runs, the global tracer is
// the API's no-op one, `parentFrom` does not even parse a traceparent, and a span costs a call that
// returns a shared non-recording span. On, spans go to an OTLP/HTTP collector in batches.
// Contexts are passed explicitly (no async context manager): a reconcile pass is one queue task,
// and its parent comes from the intent's `traceparent` in the link frame.
//
// A new step in a traced path (a snapshot, an ops run) is one line:
//   await withSpan("snapshot.create", parent, { "sandbox.id": id }, (ctx) => doIt(ctx));
import type { IncomingMessage, ServerResponse } from "node:http";
import { context, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type Context } from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BatchSpanProcessor, TracerProvider, type ReadableSpan } from "@opentelemetry/sdk-trace";
import { endWithResponse } from "./http-span.ts";

const propagator = new W3CTraceContextPropagator();
let provider: TracerProvider | null = null;
let batches: BatchSpanProcessor | null = null;

/** The instrumentation scopes: the agent's own steps, and the embedded runtime's. */
export const AGENT_SCOPE = "sandbox-agent";
export const RUNTIME_SCOPE = "agent-runtime";

export interface TracingOptions {
  /** OTLP/HTTP base URL of a collector, e.g. http://127.0.0.1:4318 (spans go to /v1/traces). */
  endpoint: string;
  serviceName?: string;
}

/** Turns tracing on for this process; returns its shutdown (which flushes). */
export function startTracing(opts: TracingOptions): () => Promise<void> {
  const url = `${opts.endpoint.replace(/\/$/, "")}/v1/traces`;
  const b = new BatchSpanProcessor({ exporter: new OTLPTraceExporter({ url }), scheduledDelayMillis: 500 });
  const p = new TracerProvider({ resource: resourceFromAttributes({ "service.name": opts.serviceName ?? "sandbox-agent" }), spanProcessors: [b] });
  trace.setGlobalTracerProvider(p);
  provider = p;
  batches = b;
  return async () => {
    provider = null;
    batches = null;
    await p.shutdown();
    trace.disable();
  };
}

export function tracingOn(): boolean {
  return provider !== null;
}

/** Exports spans another process recorded (a pod runtime's, checked by agent/pod-spans.ts) with
 * the agent's own, each under the resource it carries. */
export function forwardSpans(spans: readonly ReadableSpan[]): void {
  for (const s of spans) batches?.onEnd(s);
}

/** Sends what is buffered now (tests, and before a planned exit). */
export async function flushTraces(): Promise<void> {
  await provider?.forceFlush();
}

/** The context a W3C traceparent names (ROOT when tracing is off or there is none). */
export function parentFrom(traceparent: string | undefined): Context {
  if (!provider || !traceparent) return ROOT_CONTEXT;
  return propagator.extract(ROOT_CONTEXT, { traceparent }, { get: (c, k) => c[k], keys: (c) => Object.keys(c) });
}

/** The traceparent of a context's span, to carry across a hop (undefined when not recording). */
export function traceparentOf(ctx: Context): string | undefined {
  if (!provider || !trace.getSpan(ctx)?.isRecording()) return undefined;
  const carrier: Record<string, string> = {};
  propagator.inject(ctx, carrier, { set: (c, k, v) => (c[k] = v) });
  return carrier.traceparent;
}

/** Runs `fn` in a span named `name` under `parent`; the span ends when `fn` settles. */
export async function withSpan<T>(name: string, parent: Context, attributes: Attributes, fn: (ctx: Context) => Promise<T> | T, scope = AGENT_SCOPE): Promise<T> {
  if (!provider) return fn(parent);
  const span = trace.getTracer(scope).startSpan(name, { attributes }, parent);
  const ctx = trace.setSpan(parent, span);
  try {
    return await context.with(ctx, () => fn(ctx));
  } catch (err) {
    span.recordException(err as Error);
    span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error)?.message ?? String(err) });
    throw err;
  } finally {
    span.end();
  }
}

/** The trace id of a context's span ("" when none), for log lines. */
export function traceIdOf(ctx: Context): string {
  return trace.getSpan(ctx)?.spanContext().traceId ?? "";
}

/**
 * An HTTP hop (the ingress, the runtime) as a server span: a child of the request's `traceparent`,
 * ending when the answer is done (a stream's end included). The request's traceparent becomes the
 * span's own, so the next hop it is handed to is its child. Off, nothing is read or made.
 */
export function traceHop(name: string, req: IncomingMessage, res: ServerResponse, attributes: Attributes, scope = AGENT_SCOPE): void {
  if (!provider) return;
  const given = req.headers.traceparent;
  const span = trace.getTracer(scope).startSpan(name, { kind: SpanKind.SERVER, attributes }, parentFrom(typeof given === "string" ? given : undefined));
  const own = traceparentOf(trace.setSpan(ROOT_CONTEXT, span));
  if (own) req.headers.traceparent = own;
  endWithResponse(span, res);
}
