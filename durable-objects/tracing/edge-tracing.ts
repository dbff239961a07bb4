// The edge's OpenTelemetry traces, in workerd: spans of our own recorder (span-recorder.ts: the
// API's Span, the SDK's ReadableSpan, none of the SDK's per-span machinery) written as OTLP/protobuf
// straight from their fields into one buffer per export (otlp-proto.ts: the bytes
// ProtobufTraceSerializer writes) and sent by the OTLP/HTTP exporter's fetch transport (@opentelemetry/otlp-exporter-base's
// browser build: its retries, timeout and concurrency limit, as the OTLPTraceExporter had them).
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
// or, when the work makes no span of its own and only hands the traceparent to one hop (a DO call
// from the Worker), the cheaper `leafSpan`, which opens no AsyncLocalStorage scope:
//   await leafSpan(env, "SnapshotDO.create", { "sandbox.id": id }, (tp) => stub.create({ traceparent: tp() }));
// and from inside a Durable Object call that was handed `traceparent`, the same with it as parent:
//   await leafSpan(env, "ClusterDO.enqueue", {}, (tp) => cluster.enqueue(intents, { traceparent: tp() }), traceparent);
import { AsyncLocalStorage } from "node:async_hooks";
import { SpanKind, SpanStatusCode, type Attributes, type Span, type SpanContext } from "@opentelemetry/api";
import { createLegacyOtlpBrowserExportDelegate } from "@opentelemetry/otlp-exporter-base/browser-http";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { EncodedSpans, otlpProtoSerializer } from "../../lib/tracing/otlp-proto.ts";
import { EdgeSpan, flagsNotSampled, notSampled, parseTraceparent, randomHex, traceFlags, traceparentOf, type SpanSink } from "../../lib/tracing/span-recorder.ts";

export const EDGE_SCOPE = "sandbox-edge";
/**
 * The current request's id (its trace id) and, when traced, the current span. Untraced, the
 * traceparent handed on: the caller's (a DO call's, an incoming request's), else made on first use.
 */
const current = new AsyncLocalStorage<{ id: string; span: EdgeSpan | null; traceparent?: string }>();
let provider: FlushedSpanProcessor | null = null;
let providerFor: string | null = null;

/**
 * Holds ended spans until `flushEdgeTraces` exports them: workerd drops a request's timers when it
 * ends, so the SDK's BatchSpanProcessor timer cannot be relied on here, and arming it cost a timer
 * per span. Each span is written as OTLP protobuf when it ends (`EncodedSpans`: the span object
 * dies with its request instead of waiting on the heap for the export). At most MAX_BUFFERED
 * spans wait (more are dropped, as the batch processor drops past its queue), and one export
 * request carries them all (~170 bytes a span: at most ~1.4 MB, under the collector's 20 MiB
 * request limit). Requests of at most 1024 spans (until session 24: ~3-5 a second in obs's
 * windows) cost the collector ~0.5 µs more CPU a span than one a second (2.98 against 2.44 µs
 * a span, notes s24-trace), and the edge a fetch each.
 */
const MAX_BUFFERED = 8192;
class FlushedSpanProcessor implements SpanSink {
  readonly resource = resourceFromAttributes({ "service.name": "sandbox-edge" });
  readonly scope = { name: EDGE_SCOPE };
  private batch = new EncodedSpans();
  private readonly exporter;
  constructor(url: string) {
    // The delegate OTLPTraceExporter's browser build wraps, with our serializer in place of
    // ProtobufTraceSerializer (its other arguments as that exporter's protobuf flavour passes them).
    const serializer = otlpProtoSerializer(this.resource, this.scope);
    this.exporter = createLegacyOtlpBrowserExportDelegate({ url }, serializer, "otlp_http_span_exporter", SPAN_COUNT, undefined, "v1/traces", { "Content-Type": "application/x-protobuf" });
  }
  /** Spans waiting for the next export. */
  get buffered(): number {
    return this.batch.count;
  }
  onEnd(span: EdgeSpan): void {
    if (this.batch.count < MAX_BUFFERED) this.batch.add(span);
  }
  async forceFlush(): Promise<void> {
    const batch = this.batch;
    if (batch.count === 0) return;
    this.batch = new EncodedSpans();
    await new Promise<void>((done) => this.exporter.export([batch], () => done()));
  }
}

/** The exporter's self-metrics read a request's span count (a no-op meter here: none is given). */
const SPAN_COUNT = { name: "span" as const, countItems: (batches: EncodedSpans[]) => batches.reduce((n, b) => n + b.count, 0) };

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
/**
 * How long an armed export is waited for before it is taken for abandoned. Its wait is a timer of
 * the request or Durable Object call that armed it, kept alive by that caller's `waitUntil`: a
 * Worker request's survives its client leaving (workerd drains waitUntil after a cancel), but a
 * Durable Object's timers go with the object when it is reset or evicted, and a timer that never
 * fires left `pending` set for good: no export from this isolate again (the TtlCache and metrics
 * flush had this shape, edge-metrics.ts FLUSH_JOIN_MS). Past this the next caller arms another;
 * one merely late then exports beside it (two disjoint batches).
 */
export const ARMED_FORGOTTEN_MS = 3 * FLUSH_MS;
let lastFlush = 0;
let pending: { armed: number } | null = null;

/**
 * The isolate's next export, at most one per FLUSH_MS, for `waitUntil` at the end of a request or
 * DO call: it takes every span ended until it runs, so each span is exported within about FLUSH_MS
 * (workerd drops a request's timers when it ends, so the batch timer cannot be relied on). Only the
 * caller that starts it gets it to hold (its timer lives in that caller's context); the others get
 * nothing to wait for, which spared a `waitUntil` per request (~0.5 % of the isolate's CPU), unless
 * it was armed ARMED_FORGOTTEN_MS ago (its caller's context gone): then this caller arms the next.
 * An export per request cost ~40 % more workerd CPU per create. With nothing buffered (an
 * unsampled request's calls) it arms nothing, as with tracing off: every span's end is followed by
 * a call here from the request or call it ended in, which then arms the export.
 */
export function flushEdgeTraces(): Promise<void> | undefined {
  if (!provider || provider.buffered === 0) return undefined;
  const now = Date.now();
  if (pending && now - pending.armed < ARMED_FORGOTTEN_MS) return undefined;
  const p = provider;
  const wait = Math.max(0, lastFlush + FLUSH_MS - now);
  const mine = { armed: now };
  const flush = (wait ? new Promise<void>((r) => setTimeout(r, wait)) : Promise.resolve()).then(() => {
    lastFlush = Date.now();
    // A late one taken for abandoned leaves the one armed after it in place, so one export stays
    // armed (tracing-abandoned.test.ts "fires late" fails without this check).
    if (pending === mine) pending = null;
    return p.forceFlush();
  });
  pending = mine;
  return flush;
}

export function tracingOn(env: TracingEnv): boolean {
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT);
}

/** The trace id of the request or traced call this code runs in ("" outside one). */
export function currentTraceId(): string {
  return current.getStore()?.id ?? "";
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

/**
 * Whether a span started here without a parent handed in would be recorded: tracing on, and the
 * current request (if any) sampled. For a wrapper that does work of its own only to make a span.
 */
export function spanRecorded(env: TracingEnv): boolean {
  if (!tracer(env)) return false;
  const store = current.getStore();
  return !store || store.span !== null;
}

/** Adds attributes known only once the work ran (a decision, a verdict) to the current span. */
export function annotateSpan(attributes: Attributes): void {
  current.getStore()?.span?.setAttributes(attributes);
}

/**
 * Runs `work` in a span named `name`: a child of `parent` (a traceparent from another object or
 * hop) or of the current span. With tracing off, or in an unsampled trace, it only runs `work`.
 * Not an async function: off and unsampled it hands back `work`'s own promise, with no frame of its
 * own around it (a sync throw still comes back as a rejection, as from an async function).
 */
export function edgeSpan<T>(env: TracingEnv, name: string, attributes: Attributes, work: () => Promise<T>, parent?: string, kind = SpanKind.INTERNAL): Promise<T> {
  try {
    const sink = tracer(env);
    // Off, a call handed a traceparent (another object's) keeps it for the hops it makes. So does a
    // call in an unsampled trace (handed a traceparent flagged not sampled, or inside an unsampled
    // request): parent-based sampling records none of it, so no span object is made.
    if (!sink) return parent ? current.run({ id: parent.slice(3, 35), span: null, traceparent: parent }, work) : work();
    let ctx: SpanContext | undefined;
    if (parent) {
      const flags = traceFlags(parent);
      if (flagsNotSampled(flags)) return current.run({ id: parent.slice(3, 35), span: null, traceparent: parent }, work);
      ctx = parseTraceparent(parent, flags); // a malformed one starts a trace
    } else {
      const store = current.getStore();
      if (store && !store.span) return work();
      ctx = store?.span?.spanContext();
    }
    return inSpan(new EdgeSpan(sink, name, kind, attributes, ctx), work);
  } catch (err) {
    return Promise.reject(err);
  }
}

/** `work` in `span`'s scope, the span ended (failed, if `work` failed) when it settles. */
function inSpan<T>(span: EdgeSpan, work: () => Promise<T>): Promise<T> {
  return endedWhenSettled(span, () => current.run({ id: span.spanContext().traceId, span }, work));
}

/**
 * Runs `work` in a span named `name`, a child of the current span (a new trace outside one, as
 * `edgeSpan`), that does NOT become the current span: for a step that makes no span or annotation
 * of its own and at most hands a traceparent to one hop (a Durable Object call, the API key check),
 * so it rides the current AsyncLocalStorage scope instead of opening one (an `AsyncLocalStorage.run`
 * per span, ~5-9 µs of the isolate's time each in workerd's profile). `work` gets the
 * traceparent to hand on: this span's; off or in an unsampled request, `currentTraceparent`'s. A
 * span or annotation made inside `work` would name the enclosing span; log lines keep its id.
 * `parent`: a traceparent another object handed this call (a Durable Object's hop to the next
 * one), whose child the span is; off, `work` gets `parent` itself, without the scope `edgeSpan`
 * would open only to hand it on. Not an async function, as `edgeSpan`.
 */
export function leafSpan<T>(env: TracingEnv, name: string, attributes: Attributes, work: (traceparent: () => string | undefined) => Promise<T>, parent?: string): Promise<T> {
  try {
    const sink = tracer(env);
    let ctx: SpanContext | undefined;
    if (parent) {
      // A hop made from inside a Durable Object call that was handed `parent`: off, or in an
      // unsampled trace, the hop gets `parent` as it came (what edgeSpan's scope would hand it).
      if (!sink) return work(() => parent);
      const flags = traceFlags(parent);
      if (flagsNotSampled(flags)) return work(() => parent);
      ctx = parseTraceparent(parent, flags); // a malformed one starts a trace
    } else {
      if (!sink) return work(currentTraceparent);
      const store = current.getStore();
      if (store && !store.span) return work(currentTraceparent);
      ctx = store?.span?.spanContext();
    }
    return inLeafSpan(new EdgeSpan(sink, name, SpanKind.INTERNAL, attributes, ctx), work);
  } catch (err) {
    return Promise.reject(err);
  }
}

/** `work` handed `span`'s traceparent, the span ended (failed, if `work` failed) when it settles. */
function inLeafSpan<T>(span: EdgeSpan, work: (traceparent: () => string | undefined) => Promise<T>): Promise<T> {
  return endedWhenSettled(span, () => work(() => traceparentOf(span.spanContext())));
}

/**
 * What `run` hands back, `span` ended when it settles: failed (what the SDK's callers record) if it
 * rejects or `run` throws. What an async function awaiting it did (`Promise.resolve` is what
 * `await` does to it), with one reaction in place of the function's frame and its own promise.
 */
function endedWhenSettled<T>(span: EdgeSpan, run: () => Promise<T>): Promise<T> {
  let running: Promise<T>;
  try {
    running = run();
  } catch (err) {
    running = Promise.reject(err);
  }
  return Promise.resolve(running).then(
    (value) => {
      span.end();
      return value;
    },
    (err: unknown) => {
      span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error)?.message ?? String(err) });
      span.end();
      throw err;
    },
  );
}

/**
 * A request's server span, and its id: the trace id (from the caller's traceparent when it sent
 * one). With tracing off the id is the caller's trace id or a fresh random one, and no span exists;
 * so too when the caller's traceparent is flagged not sampled (parent-based sampling, as the SDK's
 * default sampler: nothing of the request is recorded, and its traceparent goes on as it came).
 */
export function startRequestSpan(env: TracingEnv, name: string, traceparent: string | null): { id: string; span: Span | null; run<T>(work: () => Promise<T>): Promise<T> } {
  const caller = traceparent ? parseTraceparent(traceparent) : undefined;
  const sink = tracer(env);
  // An unsampled request takes the untraced path whole: a span object per request and per Durable
  // Object call that records nothing cost ~2.6 % of the isolate's sampled time per create.
  if (!sink || notSampled(caller)) {
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
