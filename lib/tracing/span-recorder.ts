// The edge's spans without the SDK's per-span machinery. @opentelemetry/sdk-trace's Span cost
// ~2.5 % of the isolate's CPU per create (profile, notes s8-obs §4: its clock, attribute cleaning,
// span limits, the sampler and the processor chain), for what the edge uses of it: a name, a
// kind, ids, a parent, attributes, a status and two times. An `EdgeSpan` is the @opentelemetry/api
// `Span` a caller sees and, ended, the `ReadableSpan` the OTLP exporter encodes (the same fields
// the SDK's span hands it), so the collector gets the same spans. A pod's runtime records its
// spans with it too (controllers/runtime/pod-tracing.ts), keeping the SDK out of its bundle.
import { SpanKind, SpanStatusCode, type Attributes, type AttributeValue, type HrTime, type Link, type Span, type SpanContext, type SpanStatus, type TimeInput } from "@opentelemetry/api";
import type { InstrumentationScope } from "@opentelemetry/core";
import type { Resource } from "@opentelemetry/resources";
import type { ReadableSpan } from "@opentelemetry/sdk-trace";

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
const SAMPLED = 1;

/** A W3C traceparent (version 00) as the remote span context it names; undefined if malformed or all-zero. */
export function parseTraceparent(traceparent: string): SpanContext | undefined {
  const m = TRACEPARENT.exec(traceparent);
  if (!m || /^0+$/.test(m[1]!) || /^0+$/.test(m[2]!)) return undefined;
  return { traceId: m[1]!, spanId: m[2]!, traceFlags: parseInt(m[3]!, 16), isRemote: true };
}

export function traceparentOf(ctx: SpanContext): string {
  return `00-${ctx.traceId}-${ctx.spanId}-0${ctx.traceFlags & SAMPLED}`;
}

/** Random lowercase hex of `chars` (a multiple of 8) characters, as the SDK's id generator makes them. */
export function randomHex(chars: number): string {
  let s = "";
  for (let i = 0; i < chars; i += 8) s += ((Math.random() * 0x1_0000_0000) >>> 0).toString(16).padStart(8, "0");
  return s;
}

function hrTime(ms: number): HrTime {
  const s = Math.floor(ms / 1000);
  return [s, Math.round((ms - s * 1000) * 1e6)];
}

/** Where ended spans go (the exporter's buffer), and what every span of this recorder shares. */
export interface SpanSink {
  readonly resource: Resource;
  readonly scope: InstrumentationScope;
  onEnd(span: ReadableSpan): void;
}

export class EdgeSpan implements Span, ReadableSpan {
  name: string;
  readonly kind: SpanKind;
  readonly parentSpanContext: SpanContext | undefined;
  readonly attributes: Attributes = {};
  readonly links: Link[] = [];
  readonly events: ReadableSpan["events"] = [];
  readonly startTime: HrTime;
  endTime: HrTime = [0, 0];
  duration: HrTime = [0, 0];
  status: SpanStatus = { code: SpanStatusCode.UNSET };
  ended = false;
  readonly droppedAttributesCount = 0;
  readonly droppedEventsCount = 0;
  readonly droppedLinksCount = 0;
  readonly #ctx: SpanContext;
  readonly #start: number;
  readonly #sink: SpanSink;
  readonly #recording: boolean;

  /** A child of `parent` (a new trace without one); one whose parent is not sampled records nothing, as the SDK's default sampler decides. */
  constructor(sink: SpanSink, name: string, kind: SpanKind, attributes: Attributes | undefined, parent: SpanContext | undefined) {
    this.#sink = sink;
    this.name = name;
    this.kind = kind;
    this.parentSpanContext = parent;
    this.#recording = !parent || (parent.traceFlags & SAMPLED) === SAMPLED;
    this.#ctx = { traceId: parent?.traceId ?? randomHex(32), spanId: randomHex(16), traceFlags: this.#recording ? SAMPLED : 0 };
    this.#start = Date.now();
    this.startTime = hrTime(this.#start);
    if (attributes) this.setAttributes(attributes);
  }

  get resource(): Resource {
    return this.#sink.resource;
  }
  get instrumentationScope(): InstrumentationScope {
    return this.#sink.scope;
  }
  spanContext(): SpanContext {
    return this.#ctx;
  }
  isRecording(): boolean {
    return this.#recording && !this.ended;
  }
  setAttribute(key: string, value: AttributeValue): this {
    // As the SDK: nothing after the end, no empty key, no null or undefined value.
    if (!this.ended && key && value !== undefined && value !== null) this.attributes[key] = value;
    return this;
  }
  setAttributes(attributes: Attributes): this {
    for (const key in attributes) this.setAttribute(key, attributes[key]!);
    return this;
  }
  setStatus(status: SpanStatus): this {
    if (!this.ended) this.status = status;
    return this;
  }
  updateName(name: string): this {
    if (!this.ended) this.name = name;
    return this;
  }
  // The edge records no events or links; the methods exist for the Span interface.
  addEvent(): this {
    return this;
  }
  addLink(): this {
    return this;
  }
  addLinks(): this {
    return this;
  }
  recordException(): void {}
  end(_endTime?: TimeInput): void {
    if (this.ended) return;
    this.ended = true;
    const end = Date.now();
    this.endTime = hrTime(end);
    this.duration = hrTime(end - this.#start);
    if (this.#recording) this.#sink.onEnd(this);
  }
}
