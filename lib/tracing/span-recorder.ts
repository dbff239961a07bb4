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
import type { OtlpProtoSpan, ProtoWriter } from "./otlp-proto.ts";

/** W3C trace-flags' sampled bit. */
const SAMPLED = 1;

/** Whether `parent` is a context flagged not sampled: parent-based sampling records none of its children. */
export function notSampled(parent: SpanContext | undefined): parent is SpanContext {
  return parent !== undefined && (parent.traceFlags & SAMPLED) !== SAMPLED;
}

/** A lowercase hex digit's value by its character code, -1 for any other ASCII character. */
const HEX_DIGIT = Int8Array.from({ length: 128 }, (_, c) => (c >= 48 && c <= 57 ? c - 48 : c >= 97 && c <= 102 ? c - 87 : -1));
const hexDigit = (c: number): number => (c < 128 ? HEX_DIGIT[c]! : -1);

/**
 * The trace flags of a W3C traceparent (version 00, lowercase hex, neither id all zero), -1 if it
 * is malformed. One pass over its characters, no regular expression and nothing allocated: each
 * Durable Object call a request makes checks its caller's, sampled or not (the regular expression
 * and slices were parseTraceparent's ~1.7 µs a call in workerd's profile, the most of what an
 * unsampled create spent in tracing code beyond tracing off).
 */
export function traceFlags(traceparent: string): number {
  const t = traceparent;
  if (t.length !== 55 || t.charCodeAt(0) !== 48 || t.charCodeAt(1) !== 48 || t.charCodeAt(2) !== 45 || t.charCodeAt(35) !== 45 || t.charCodeAt(52) !== 45) return -1;
  let trace = 0;
  for (let i = 3; i < 35; i++) {
    const d = hexDigit(t.charCodeAt(i));
    if (d < 0) return -1;
    trace |= d;
  }
  let span = 0;
  for (let i = 36; i < 52; i++) {
    const d = hexDigit(t.charCodeAt(i));
    if (d < 0) return -1;
    span |= d;
  }
  const high = hexDigit(t.charCodeAt(53));
  const low = hexDigit(t.charCodeAt(54));
  if (high < 0 || low < 0 || trace === 0 || span === 0) return -1;
  return (high << 4) | low;
}

/** Whether `flags` (traceFlags') are a well-formed traceparent's flagged not sampled. */
export function flagsNotSampled(flags: number): boolean {
  return flags >= 0 && (flags & SAMPLED) !== SAMPLED;
}

/** A W3C traceparent (version 00) as the remote span context it names; undefined if malformed or all-zero. `flags`: its traceFlags, when the caller has them. */
export function parseTraceparent(traceparent: string, flags = traceFlags(traceparent)): SpanContext | undefined {
  if (flags < 0) return undefined;
  return { traceId: traceparent.slice(3, 35), spanId: traceparent.slice(36, 52), traceFlags: flags, isRemote: true };
}

export function traceparentOf(ctx: SpanContext): string {
  return `00-${ctx.traceId}-${ctx.spanId}-0${ctx.traceFlags & SAMPLED}`;
}

/** Lowercase hex digits' character codes, and one scratch list of codes for each id length. */
const HEX_CODES = Array.from("0123456789abcdef", (c) => c.charCodeAt(0));
const CODES: Record<number, number[]> = { 16: new Array<number>(16).fill(48), 32: new Array<number>(32).fill(48) };

/** Random lowercase hex of `chars` (16 or 32: a span or trace id) characters, from Math.random as the SDK's id generator. */
export function randomHex(chars: number): string {
  // One flat string from character codes: an id built by concatenation was a rope, which the OTLP
  // writer's hex-to-bytes pass (and the traceparent's template) read through. Ids of a create (a
  // trace id, six span ids, each written and handed on) cost ~0.7-1.3 µs less so (node 22, 20
  // interleaved pairs, 0.69-0.71 of the rope's time; notes s23-trace).
  const codes = CODES[chars] ?? new Array<number>(chars);
  for (let i = 0; i < chars; i += 8) {
    let n = (Math.random() * 0x1_0000_0000) >>> 0;
    for (let j = i + 7; j >= i; j--) {
      codes[j] = HEX_CODES[n & 15]!;
      n >>>= 4;
    }
  }
  return String.fromCharCode.apply(null, codes);
}

/**
 * `n` zero bytes, for an id: a plain array of small integers, not a typed array, which cost more
 * to make than its reads save for 8 or 16 bytes (node 22, notes s24-trace).
 */
function idBytes(n: number): number[] {
  return n === 8 ? [0, 0, 0, 0, 0, 0, 0, 0] : n === 16 ? [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] : new Array<number>(n).fill(0);
}

/** `n` random bytes (8 or 16: a span or trace id), from Math.random as `randomHex`. */
function randomIdBytes(n: number): number[] {
  const bytes = idBytes(n);
  for (let i = 0; i < n; i += 4) {
    const w = (Math.random() * 0x1_0000_0000) >>> 0;
    bytes[i] = w >>> 24;
    bytes[i + 1] = (w >>> 16) & 255;
    bytes[i + 2] = (w >>> 8) & 255;
    bytes[i + 3] = w & 255;
  }
  return bytes;
}

/** An id's bytes as lowercase hex. */
function hexOf(bytes: number[]): string {
  const codes = CODES[bytes.length * 2] ?? new Array<number>(bytes.length * 2);
  for (let i = 0; i < bytes.length; i++) {
    codes[2 * i] = HEX_CODES[bytes[i]! >>> 4]!;
    codes[2 * i + 1] = HEX_CODES[bytes[i]! & 15]!;
  }
  return String.fromCharCode.apply(null, codes);
}

/** A hex digit's value by its character code (either case), as the SDK serializer's `hexToBinary` reads it. */
const HEX_VALUE = Uint8Array.from({ length: 128 }, (_, c) => (c <= 57 ? c - 48 : c >= 97 ? c - 87 : c - 55) & 0xff);

/** A hex id (another process's, from a traceparent) as its bytes, as the serializer turns it into bytes. */
function bytesOfHex(hex: string): number[] {
  const bytes = idBytes(hex.length >>> 1);
  for (let i = 0, p = 0; p < bytes.length; i += 2) bytes[p++] = (HEX_VALUE[hex.charCodeAt(i)]! << 4) | HEX_VALUE[hex.charCodeAt(i + 1)]!;
  return bytes;
}

/**
 * A recorded span's context: the API's SpanContext, whose ids are also kept as the bytes OTLP
 * carries, so the writer copies bytes instead of reading hex for every id of every span (the hex
 * pass was the largest tracing function in workerd's profiles, notes s23-trace). A span's own id
 * is made as bytes, its hex spelled once when first read (a traceparent handed on); a child of a
 * local span shares its parent's trace id, bytes and hex; another process's ids are read once.
 */
export class RecordedSpanContext implements SpanContext {
  readonly traceFlags: number;
  readonly traceIdBytes: number[];
  readonly spanIdBytes: number[];
  #traceId: string | undefined;
  #spanId: string | undefined;

  constructor(traceIdBytes: number[], traceId: string | undefined, spanIdBytes: number[], traceFlags: number) {
    this.traceIdBytes = traceIdBytes;
    this.#traceId = traceId;
    this.spanIdBytes = spanIdBytes;
    this.traceFlags = traceFlags;
  }
  get traceId(): string {
    return (this.#traceId ??= hexOf(this.traceIdBytes));
  }
  get spanId(): string {
    return (this.#spanId ??= hexOf(this.spanIdBytes));
  }
}

function hrTime(ms: number): HrTime {
  const s = Math.floor(ms / 1000);
  return [s, Math.round((ms - s * 1000) * 1e6)];
}

/** Where ended spans go (the exporter's buffer), and what every span of this recorder shares. */
export interface SpanSink {
  readonly resource: Resource;
  readonly scope: InstrumentationScope;
  onEnd(span: EdgeSpan): void;
}

/** What every span shares (the edge records no events or links; a span's status until it is set). */
const NO_LINKS: Link[] = Object.freeze([]) as unknown as Link[];
const NO_EVENTS: ReadableSpan["events"] = Object.freeze([]) as unknown as ReadableSpan["events"];
const UNSET: SpanStatus = Object.freeze({ code: SpanStatusCode.UNSET });

// Per span only what differs: its name, kind, parent, ids, attributes, status and two clock
// readings. Its HrTimes, the empty lists and the dropped counts are computed or shared when the
// exporter reads them (once, at the export), not made for each span.
export class EdgeSpan implements Span, ReadableSpan, OtlpProtoSpan {
  name: string;
  readonly kind: SpanKind;
  readonly parentSpanContext: SpanContext | undefined;
  attributes: Attributes;
  status: SpanStatus = UNSET;
  ended = false;
  readonly #ctx: RecordedSpanContext;
  /** The parent's span id as bytes (null for a root). */
  readonly #parentIdBytes: number[] | null;
  /** Whether `attributes` is this span's own object, or the one its maker handed it (copied before a change). */
  #ownAttributes: boolean;
  readonly #start: number;
  #end = 0;
  readonly #sink: SpanSink;
  readonly #recording: boolean;

  /**
   * A child of `parent` (a new trace without one); one whose parent is not sampled records nothing,
   * as the SDK's default sampler decides. `attributes` is kept as it is handed in, not copied (the
   * SDK copies): every maker hands a fresh literal and never touches it again; the span copies it
   * before its first change (`setAttribute`), and copies and cleans one with an empty key or a null
   * or undefined value, as the SDK would.
   */
  constructor(sink: SpanSink, name: string, kind: SpanKind, attributes: Attributes | undefined, parent: SpanContext | undefined) {
    this.#sink = sink;
    this.name = name;
    this.kind = kind;
    this.parentSpanContext = parent;
    this.#recording = !notSampled(parent);
    const flags = this.#recording ? SAMPLED : 0;
    if (parent instanceof RecordedSpanContext) {
      this.#ctx = new RecordedSpanContext(parent.traceIdBytes, parent.traceId, randomIdBytes(8), flags);
      this.#parentIdBytes = parent.spanIdBytes;
    } else if (parent) {
      this.#ctx = new RecordedSpanContext(bytesOfHex(parent.traceId), parent.traceId, randomIdBytes(8), flags);
      this.#parentIdBytes = parent.spanId ? bytesOfHex(parent.spanId) : null;
    } else {
      this.#ctx = new RecordedSpanContext(randomIdBytes(16), undefined, randomIdBytes(8), flags);
      this.#parentIdBytes = null;
    }
    this.#start = Date.now();
    this.#ownAttributes = !attributes || !clean(attributes);
    this.attributes = this.#ownAttributes ? {} : attributes!;
    if (attributes && this.#ownAttributes) this.setAttributes(attributes);
  }

  get startTime(): HrTime {
    return hrTime(this.#start);
  }
  get endTime(): HrTime {
    return hrTime(this.#end);
  }
  get duration(): HrTime {
    return hrTime(this.ended ? this.#end - this.#start : 0);
  }
  get links(): Link[] {
    return NO_LINKS;
  }
  get events(): ReadableSpan["events"] {
    return NO_EVENTS;
  }
  get droppedAttributesCount(): number {
    return 0;
  }
  get droppedEventsCount(): number {
    return 0;
  }
  get droppedLinksCount(): number {
    return 0;
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
    if (this.ended || !key || value === undefined || value === null) return this;
    if (!this.#ownAttributes) {
      this.attributes = { ...this.attributes };
      this.#ownAttributes = true;
    }
    this.attributes[key] = value;
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
  /** The ended span as its OTLP/protobuf Span message (otlp-proto.ts), for a sink that sends that. */
  writeOtlpProto(w: ProtoWriter): void {
    const ctx = this.#ctx;
    w.span(ctx.traceIdBytes, ctx.spanIdBytes, this.#parentIdBytes, this.parentSpanContext?.isRemote === true, ctx.traceFlags, this.name, this.kind, this.#start, this.#end, this.attributes, this.status);
  }
  end(_endTime?: TimeInput): void {
    if (this.ended) return;
    this.ended = true;
    this.#end = Date.now();
    if (this.#recording) this.#sink.onEnd(this);
  }
}

/** Whether `attributes` is as the SDK's `setAttributes` would leave it: no empty key, no null or undefined value. */
function clean(attributes: Attributes): boolean {
  for (const key in attributes) {
    const value = attributes[key];
    if (!key || value === undefined || value === null) return false;
  }
  return true;
}

/** A span another process recorded, as the exporter reads it (the agent forwards a pod runtime's). */
export interface RecordedSpanFields {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: SpanKind;
  startMs: number;
  endMs: number;
  status: SpanStatus;
  attributes: Attributes;
}

export function recordedSpan(f: RecordedSpanFields, resource: Resource, scope: InstrumentationScope): ReadableSpan {
  const ctx: SpanContext = { traceId: f.traceId, spanId: f.spanId, traceFlags: SAMPLED };
  const end = Math.max(f.startMs, f.endMs);
  return {
    name: f.name,
    kind: f.kind,
    spanContext: () => ctx,
    parentSpanContext: { traceId: f.traceId, spanId: f.parentSpanId, traceFlags: SAMPLED, isRemote: true },
    startTime: hrTime(f.startMs),
    endTime: hrTime(end),
    duration: hrTime(end - f.startMs),
    status: f.status,
    attributes: f.attributes,
    links: NO_LINKS,
    events: NO_EVENTS,
    ended: true,
    resource,
    instrumentationScope: scope,
    droppedAttributesCount: 0,
    droppedEventsCount: 0,
    droppedLinksCount: 0,
  };
}
