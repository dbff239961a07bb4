// OTLP/protobuf (ExportTraceServiceRequest) written straight from the edge's span fields into one
// growing byte buffer per export: the bytes the ecosystem's ProtobufTraceSerializer
// (@opentelemetry/otlp-transformer) writes for the same spans, byte for byte
// (test/unit/durable-objects/otlp-proto.test.ts holds it to that), with no text per span, no join
// and no size-estimating pass. About a third of OTLP/JSON's bytes (~170 against ~530 a span), so
// workerd's send and the collector's parse have less to do.
// What the edge's spans never carry is not written: a trace state, events and links (always empty).
import type { Attributes, SpanContext, SpanKind, SpanStatus } from "@opentelemetry/api";
import type { InstrumentationScope } from "@opentelemetry/core";
import type { Resource } from "@opentelemetry/resources";

/** OTLP span flags: the W3C trace flags, "has is-remote" and "is remote" (the parent's). */
const HAS_IS_REMOTE = 0x100;
const IS_REMOTE = 0x200;
/** Wire types. */
const VARINT = 0;
const FIXED64 = 1;
const LEN = 2;
const FIXED32 = 5;
const TWO_32 = 0x1_0000_0000;

/** A span that writes itself (its fields) through `ProtoWriter.span`. */
export interface OtlpProtoSpan {
  writeOtlpProto(w: ProtoWriter): void;
}

/** Protobuf into one buffer that doubles when full. Every field number here is below 16: one tag byte. */
export class ProtoWriter {
  buf: Uint8Array;
  pos = 0;
  #view: DataView;
  readonly #encoder = new TextEncoder();

  constructor(size: number) {
    this.buf = new Uint8Array(size);
    this.#view = new DataView(this.buf.buffer);
  }

  #ensure(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.pos + n) size *= 2;
    const grown = new Uint8Array(size);
    grown.set(this.buf.subarray(0, this.pos));
    this.buf = grown;
    this.#view = new DataView(grown.buffer);
  }

  /** A field's key: every field number here is below 16, one byte. */
  tag(field: number, wire: number): void {
    this.#ensure(1);
    this.buf[this.pos++] = (field << 3) | wire;
  }

  /** A varint: uint32 directly, other integers as int64 (two's complement, 10 bytes when negative). */
  varint(value: number): void {
    this.#ensure(10);
    const buf = this.buf;
    if (value >= 0 && value <= 0xffff_ffff) {
      let v = value >>> 0;
      while (v > 127) {
        buf[this.pos++] = (v & 127) | 128;
        v >>>= 7;
      }
      buf[this.pos++] = v;
      return;
    }
    const abs = Math.abs(value);
    let low = abs >>> 0;
    let high = (abs / TWO_32) >>> 0;
    if (value < 0) {
      low = ~low >>> 0;
      high = ~high >>> 0;
      low = (low + 1) >>> 0;
      if (low === 0) high = (high + 1) >>> 0;
    }
    while (high > 0 || low > 127) {
      buf[this.pos++] = (low & 127) | 128;
      low = ((low >>> 7) | (high << 25)) >>> 0;
      high >>>= 7;
    }
    buf[this.pos++] = low & 127;
  }

  /** Four bytes, little-endian (room checked by the caller). */
  #fixed32(v: number): void {
    const buf = this.buf;
    buf[this.pos++] = v & 255;
    buf[this.pos++] = (v >>> 8) & 255;
    buf[this.pos++] = (v >>> 16) & 255;
    buf[this.pos++] = (v >>> 24) & 255;
  }

  /** Unix nanoseconds as fixed64, from milliseconds: the SDK's HrTime of them, as the serializer writes it (room checked by the caller). */
  #nanos(ms: number): void {
    const seconds = Math.floor(ms / 1000);
    const nanos = Math.round((ms - seconds * 1000) * 1e6);
    // seconds * 1e9 + nanos passes 2^53: in 16-bit halves of the seconds, each product exact.
    const fromLow = (seconds & 0xffff) * 1e9;
    const fromHigh = ((seconds / 65536) >>> 0) * 1e9;
    const low = (fromLow >>> 0) + (((fromHigh & 0xffff) * 65536) >>> 0) + nanos;
    const high = (Math.floor(fromLow / TWO_32) + ((fromHigh / 65536) >>> 0) + Math.floor(low / TWO_32)) >>> 0;
    this.#fixed32(low >>> 0);
    this.#fixed32(high);
  }

  #double(v: number): void {
    this.#ensure(8);
    this.#view.setFloat64(this.pos, v, true);
    this.pos += 8;
  }

  /** A length-delimited string: ASCII byte by byte in one pass, anything else through the encoder. */
  string(s: string): void {
    const len = s.length;
    if (len > 127) return this.#longString(s);
    this.#ensure(1 + len);
    const buf = this.buf;
    const at = this.pos;
    buf[at] = len;
    for (let i = 0; i < len; i++) {
      const c = s.charCodeAt(i);
      if (c > 127) return this.bytes(this.#encoder.encode(s)); // rewritten from `at`: pos has not moved
      buf[at + 1 + i] = c;
    }
    this.pos = at + 1 + len;
  }

  #longString(s: string): void {
    for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) > 127) return this.bytes(this.#encoder.encode(s));
    this.varint(s.length);
    this.#ensure(s.length);
    const buf = this.buf;
    for (let i = 0; i < s.length; i++) buf[this.pos++] = s.charCodeAt(i);
  }

  /** Length-delimited bytes. */
  bytes(b: Uint8Array): void {
    this.varint(b.length);
    this.raw(b);
  }

  /** Bytes already encoded (a field or message), as they are. */
  raw(b: Uint8Array): void {
    this.#ensure(b.length);
    this.buf.set(b, this.pos);
    this.pos += b.length;
  }

  /** Room for a message's length, `reserve` bytes (what it most likely needs); `close` writes it. */
  #open(reserve: number): number {
    this.#ensure(reserve);
    const at = this.pos;
    this.pos += reserve;
    return at;
  }

  /** The length of what followed `#open(reserve)`, its bytes moved when it needs another size. */
  #close(at: number, reserve: number): void {
    const length = this.pos - at - reserve;
    const size = varintSize(length);
    if (size !== reserve) {
      this.#ensure(size - reserve);
      this.buf.copyWithin(at + size, at + reserve, this.pos);
      this.pos += size - reserve;
    }
    let v = length;
    let i = at;
    while (v > 127) {
      this.buf[i++] = (v & 127) | 128;
      v >>>= 7;
    }
    this.buf[i] = v;
  }

  /** `attributes` as repeated KeyValue in field `field`. */
  attributes(field: number, attributes: Attributes): void {
    for (const key in attributes) {
      if (!Object.hasOwn(attributes, key)) continue;
      this.tag(field, LEN);
      this.#keyValue(key, attributes[key]);
    }
  }

  #keyValue(key: string, value: unknown): void {
    const kv = this.#open(1);
    this.tag(1, LEN);
    this.string(key);
    this.tag(2, LEN);
    const v = this.#open(1);
    this.#anyValue(value);
    this.#close(v, 1);
    this.#close(kv, 1);
  }

  /** An attribute value as OTLP's AnyValue (the serializer's `writeAnyValue`); null and undefined as an empty one. */
  #anyValue(value: unknown): void {
    switch (typeof value) {
      case "string":
        this.tag(1, LEN);
        return this.string(value);
      case "boolean":
        this.tag(2, VARINT);
        return this.varint(value ? 1 : 0);
      case "number":
        if (Number.isInteger(value) && value >= -(2 ** 63) && value < 2 ** 63) {
          this.tag(3, VARINT);
          return this.varint(value);
        }
        this.tag(4, FIXED64);
        return this.#double(value);
    }
    if (value instanceof Uint8Array) {
      this.tag(7, LEN);
      return this.bytes(value);
    }
    if (Array.isArray(value)) {
      this.tag(5, LEN);
      const list = this.#open(1);
      for (const item of value) {
        this.tag(1, LEN);
        const one = this.#open(1);
        this.#anyValue(item);
        this.#close(one, 1);
      }
      return this.#close(list, 1);
    }
    if (typeof value === "object" && value !== null) {
      this.tag(6, LEN);
      const list = this.#open(1);
      for (const key in value) {
        if (!Object.hasOwn(value, key)) continue;
        this.tag(1, LEN);
        this.#keyValue(key, (value as Record<string, unknown>)[key]);
      }
      this.#close(list, 1);
    }
  }

  /**
   * One Span message in ScopeSpans' field 2, from the span's fields: ids as their bytes (16, 8 and
   * the parent's 8, or none for a root), times in ms since the epoch. The fixed-size parts are
   * written after one size check for each run of them, not one per field; the name, attributes and
   * a status message check their own (their size is the caller's).
   */
  span(traceId: number[], spanId: number[], parentId: number[] | null, parentIsRemote: boolean, traceFlags: number, name: string, kind: SpanKind, startMs: number, endMs: number, attributes: Attributes, status: SpanStatus): void {
    // The span's tag and length (reserved), trace id, span id and parent id: at most 3 + 18 + 10 + 10 bytes.
    this.#ensure(41);
    const buf = this.buf;
    buf[this.pos++] = (2 << 3) | LEN;
    const at = this.pos;
    this.pos += 2; // a span with a few attributes is 128..16383 bytes
    this.#id(1, traceId);
    this.#id(2, spanId);
    if (parentId) this.#id(4, parentId);
    this.tag(5, LEN);
    this.string(name);
    // Kind (at most 1 + 5 bytes for any SpanKind) and the two times (2 x 9).
    this.#ensure(24);
    this.buf[this.pos++] = (6 << 3) | VARINT;
    this.#smallVarint(kind + 1);
    this.buf[this.pos++] = (7 << 3) | FIXED64;
    this.#nanos(startMs);
    this.buf[this.pos++] = (8 << 3) | FIXED64;
    this.#nanos(endMs);
    this.attributes(9, attributes);
    // The dropped counts (attributes, events, links: zero, written as the serializer writes them),
    // the status (2 + its message + code, at most 1 + 10), the flags (2 + 4): at most 25 bytes
    // without the message, which `string` sizes itself.
    this.#ensure(25);
    this.buf[this.pos++] = (10 << 3) | VARINT;
    this.buf[this.pos++] = 0;
    this.buf[this.pos++] = (12 << 3) | VARINT;
    this.buf[this.pos++] = 0;
    this.buf[this.pos++] = (14 << 3) | VARINT;
    this.buf[this.pos++] = 0;
    this.buf[this.pos++] = (15 << 3) | LEN;
    const st = this.pos++;
    if (status.message) {
      this.tag(2, LEN);
      this.string(status.message);
      this.#ensure(17);
    }
    this.buf[this.pos++] = (3 << 3) | VARINT;
    this.#smallVarint(status.code);
    this.#close(st, 1);
    this.buf[this.pos++] = 0x85; // field 16, fixed32: two tag bytes
    this.buf[this.pos++] = 0x01;
    this.#fixed32((traceFlags & 0xff) | HAS_IS_REMOTE | (parentIsRemote ? IS_REMOTE : 0));
    this.#close(at, 2);
  }

  /** A varint that is most likely one byte (an enum's value): room for that checked by the caller, any other through `varint`. */
  #smallVarint(v: number): void {
    if (v >= 0 && v < 128) this.buf[this.pos++] = v;
    else this.varint(v);
  }

  /** An id's bytes in field `field` (room checked by the caller). */
  #id(field: number, id: number[]): void {
    const buf = this.buf;
    let p = this.pos;
    buf[p++] = (field << 3) | LEN;
    buf[p++] = id.length;
    for (let i = 0; i < id.length; i++) buf[p++] = id[i]!;
    this.pos = p;
  }
}

/**
 * Spans written as OTLP Span messages as they end, for one export request: what the request
 * carries of them is these bytes, as they are (`serializeRequest([batch])` writes what
 * `serializeRequest(spans)` writes for the same spans). Why at the end and not at the export: a
 * span object kept until the export (up to a second) outlives the young generation's collections,
 * so each of them copied it and it was promoted; its bytes live off the heap, and the span dies
 * with its request.
 */
export class EncodedSpans implements OtlpProtoSpan {
  readonly #writer = new ProtoWriter(16 * 1024);
  /** How many spans it holds. */
  count = 0;

  add(span: OtlpProtoSpan): void {
    span.writeOtlpProto(this.#writer);
    this.count++;
  }

  writeOtlpProto(w: ProtoWriter): void {
    w.raw(this.#writer.buf.subarray(0, this.#writer.pos));
  }
}

function varintSize(v: number): number {
  return v < 0x80 ? 1 : v < 0x4000 ? 2 : v < 0x20_0000 ? 3 : v < 0x1000_0000 ? 4 : 5;
}

/** Bytes of one message built by `write`. */
function encoded(write: (w: ProtoWriter) => void): Uint8Array {
  const w = new ProtoWriter(64);
  write(w);
  return w.buf.slice(0, w.pos);
}

/** Where a new request's spans start: room for the envelope in front of them. */
function prefixLength(resource: Uint8Array, scope: Uint8Array): number {
  return 2 + 5 + resource.length + 1 + 5 + scope.length;
}

/**
 * The exporter's serializer for the edge's spans, all of one resource and scope: one
 * ExportTraceServiceRequest around them. For the OTLP exporter's transport
 * (@opentelemetry/otlp-exporter-base's delegate), in place of ProtobufTraceSerializer.
 */
export function otlpProtoSerializer(resource: Resource, scope: InstrumentationScope) {
  // The envelope is the same for every request: ResourceSpans { resource, ScopeSpans { scope,
  // spans…, schema_url }, schema_url }. Its parts are encoded once; the spans are written first,
  // after room for the parts, which go in front once the spans' length is known.
  const resourceField = encoded((w) => {
    w.tag(1, LEN);
    const body = encoded((r) => {
      r.attributes(1, resource.attributes);
      r.tag(2, VARINT); // dropped_attributes_count, written though zero
      r.varint(0);
    });
    w.bytes(body);
  });
  const scopeField = encoded((w) => {
    w.tag(1, LEN);
    const s = scope as InstrumentationScope & { attributes?: Attributes; droppedAttributesCount?: number };
    const body = encoded((r) => {
      r.tag(1, LEN);
      r.string(s.name);
      if (s.version) {
        r.tag(2, LEN);
        r.string(s.version);
      }
      if (s.attributes) r.attributes(3, s.attributes);
      if (s.droppedAttributesCount) {
        r.tag(4, VARINT);
        r.varint(s.droppedAttributesCount);
      }
    });
    w.bytes(body);
  });
  const schemaField = (url: string | undefined) => (url ? encoded((w) => (w.tag(3, LEN), w.string(url))) : new Uint8Array(0));
  const scopeTail = schemaField(scope.schemaUrl);
  const resourceTail = schemaField(resource.schemaUrl);
  const room = prefixLength(resourceField, scopeField);
  return {
    serializeRequest(spans: OtlpProtoSpan[]): Uint8Array {
      if (spans.length === 0) return new Uint8Array(0);
      const w = new ProtoWriter(room + 256 * spans.length);
      w.pos = room;
      for (const span of spans) span.writeOtlpProto(w);
      w.raw(scopeTail);
      const scopeSpansLength = scopeField.length + (w.pos - room);
      w.raw(resourceTail);
      const resourceSpansLength = resourceField.length + 1 + varintSize(scopeSpansLength) + scopeSpansLength + resourceTail.length;
      const start = room - scopeField.length - varintSize(scopeSpansLength) - 1 - resourceField.length - varintSize(resourceSpansLength) - 1;
      const end = w.pos;
      w.pos = start;
      w.tag(1, LEN); // ExportTraceServiceRequest.resource_spans
      w.varint(resourceSpansLength);
      w.raw(resourceField);
      w.tag(2, LEN); // ResourceSpans.scope_spans
      w.varint(scopeSpansLength);
      w.raw(scopeField);
      return w.buf.subarray(start, end);
    },
    /** The collector's answer: a partial success, if any (ExportTraceServiceResponse). */
    deserializeResponse(data: Uint8Array): object {
      return readResponse(data);
    },
  };
}

/**
 * ExportTraceServiceResponse { partial_success (1): { rejected_spans (1, int64), error_message (2) } },
 * as ProtobufTraceSerializer reads it; what it does not know is skipped.
 */
function readResponse(data: Uint8Array): { partialSuccess?: { rejectedSpans?: number; errorMessage?: string } } {
  const out: { partialSuccess?: { rejectedSpans?: number; errorMessage?: string } } = {};
  for (const [field, wire, value] of protoFields(data)) {
    if (field !== 1 || wire !== LEN) continue;
    const partial: { rejectedSpans?: number; errorMessage?: string } = {};
    for (const [f, t, v] of protoFields(value as Uint8Array)) {
      if (f === 1 && t === VARINT) partial.rejectedSpans = v as number;
      else if (f === 2 && t === LEN) partial.errorMessage = new TextDecoder().decode(v as Uint8Array);
    }
    out.partialSuccess = partial;
  }
  return out;
}

/**
 * A message's fields: number, wire type and value (a varint's number; the bytes of a
 * length-delimited or fixed-size one). Also how the bench reads the collector's protobuf file
 * (test/support/otel-collector.ts).
 */
export function* protoFields(data: Uint8Array): Generator<[number, number, number | Uint8Array]> {
  let pos = 0;
  const varint = (): number => {
    let v = 0;
    let scale = 1;
    for (;;) {
      if (pos >= data.length) throw new Error("truncated varint");
      const b = data[pos++]!;
      v += (b & 127) * scale;
      if (b < 128) return v;
      scale *= 128;
    }
  };
  while (pos < data.length) {
    const key = varint();
    const wire = key & 7;
    if (wire === VARINT) yield [Math.floor(key / 8), wire, varint()];
    else if (wire === LEN) {
      const n = varint();
      yield [Math.floor(key / 8), wire, data.subarray(pos, (pos += n))];
    } else if (wire === FIXED64) yield [Math.floor(key / 8), wire, data.subarray(pos, (pos += 8))];
    else if (wire === FIXED32) yield [Math.floor(key / 8), wire, data.subarray(pos, (pos += 4))];
    else throw new Error(`unknown wire type ${wire}`);
  }
}
