// OTLP/JSON (ExportTraceServiceRequest) written straight from a span's fields: the text the
// ecosystem's JsonTraceSerializer (@opentelemetry/otlp-transformer) writes for the same spans, field
// for field (test/unit/durable-objects/otlp-json.test.ts holds it to that), without its transformer's
// object tree per span (the attribute key/value objects, the HrTime pairs, BigInt nanoseconds, a
// scope-key string per span) and the JSON.stringify walk over it. In workerd's profile the
// serialization went from ~14-18 to ~11-15 µs of isolate time per sampled create: what is left is
// mostly the join of the span texts at the export (the bytes themselves), not the writing.
// What the edge's spans never carry is not written: a trace state, events and links (always empty).
import type { Attributes, SpanContext, SpanKind, SpanStatus } from "@opentelemetry/api";
import type { InstrumentationScope } from "@opentelemetry/core";
import type { Resource } from "@opentelemetry/resources";

/** OTLP span flags: the W3C trace flags, "has is-remote" and "is remote" (the parent's). */
const HAS_IS_REMOTE = 0x100;
const IS_REMOTE = 0x200;

/** The fields of one span that its OTLP/JSON object carries. */
export interface OtlpSpanFields {
  ctx: SpanContext;
  parent: SpanContext | undefined;
  name: string;
  kind: SpanKind;
  startMs: number;
  endMs: number;
  attributes: Attributes;
  status: SpanStatus;
}

/** One span's OTLP/JSON object, as text: what the collector reads of it. */
export function otlpSpanJson(s: OtlpSpanFields): string {
  // Ids are lowercase hex (our generator's, or a traceparent's checked by its pattern): no escaping.
  let out = `{"traceId":"${s.ctx.traceId}","spanId":"${s.ctx.spanId}"`;
  if (s.parent?.spanId) out += `,"parentSpanId":"${s.parent.spanId}"`;
  out += `,"name":${JSON.stringify(s.name)},"kind":${s.kind + 1},"startTimeUnixNano":"${nanos(s.startMs)}","endTimeUnixNano":"${nanos(s.endMs)}","attributes":${attributesJson(s.attributes)},"droppedAttributesCount":0,"events":[],"droppedEventsCount":0,"status":{"code":${s.status.code}`;
  if (s.status.message !== undefined) out += `,"message":${JSON.stringify(s.status.message)}`;
  const flags = (s.ctx.traceFlags & 0xff) | HAS_IS_REMOTE | (s.parent?.isRemote ? IS_REMOTE : 0);
  return `${out}},"links":[],"droppedLinksCount":0,"flags":${flags}}`;
}

/**
 * The exporter's serializer for spans already written as OTLP/JSON objects (`otlpSpanJson`), all of
 * one resource and scope: one request body around them. For the OTLP exporter's transport
 * (@opentelemetry/otlp-exporter-base's delegate), in place of JsonTraceSerializer.
 */
export function otlpJsonSerializer(resource: Resource, scope: InstrumentationScope) {
  // A scope of @opentelemetry/core's type has a name, a version and a schema URL (no attributes).
  const scopeJson = `{"name":${JSON.stringify(scope.name)}${scope.version !== undefined ? `,"version":${JSON.stringify(scope.version)}` : ""}}`;
  const resourceSchema = resource.schemaUrl ? `,"schemaUrl":${JSON.stringify(resource.schemaUrl)}` : "";
  const scopeSchema = scope.schemaUrl !== undefined ? `,"schemaUrl":${JSON.stringify(scope.schemaUrl)}` : "";
  const head = `{"resourceSpans":[{"resource":{"attributes":${attributesJson(resource.attributes)},"droppedAttributesCount":0${resourceSchema}},"scopeSpans":[{"scope":${scopeJson},"spans":[`;
  const tail = `]${scopeSchema}}]${resourceSchema}}]}`;
  const encoder = new TextEncoder();
  return {
    serializeRequest(spans: string[]): Uint8Array {
      return encoder.encode(spans.length ? head + spans.join(",") + tail : `{"resourceSpans":[]}`);
    },
    /** The collector's answer (a partial success, if any), as JsonTraceSerializer reads it. */
    deserializeResponse(data: Uint8Array): object {
      if (data.length === 0) return {};
      try {
        return JSON.parse(new TextDecoder().decode(data)) as object;
      } catch {
        return {};
      }
    },
  };
}

/** Unix nanoseconds as a decimal string, from milliseconds (the SDK's HrTime, without the BigInt). */
function nanos(ms: number): string {
  if (Number.isInteger(ms) && ms > 0) return `${ms}000000`; // Date.now(): whole milliseconds
  const s = Math.floor(ms / 1000);
  return String(BigInt(s) * 1_000_000_000n + BigInt(Math.round((ms - s * 1000) * 1e6)));
}

function attributesJson(attributes: Attributes): string {
  let out = "[";
  for (const key in attributes) out += `${out.length > 1 ? "," : ""}{"key":${JSON.stringify(key)},"value":${anyValueJson(attributes[key])}}`;
  return `${out}]`;
}

/** An attribute value as OTLP's AnyValue (the transformer's `toAnyValue`, as text). */
function anyValueJson(value: unknown): string {
  switch (typeof value) {
    case "string":
      return `{"stringValue":${JSON.stringify(value)}}`;
    case "number":
      return Number.isInteger(value) ? `{"intValue":${value}}` : `{"doubleValue":${JSON.stringify(value)}}`;
    case "boolean":
      return `{"boolValue":${value}}`;
  }
  if (value instanceof Uint8Array) return `{"bytesValue":"${base64(value)}"}`;
  if (Array.isArray(value)) return `{"arrayValue":{"values":[${value.map(anyValueJson).join(",")}]}}`;
  if (typeof value === "object" && value !== null) {
    const kv = Object.keys(value).map((k) => `{"key":${JSON.stringify(k)},"value":${anyValueJson((value as Record<string, unknown>)[k])}}`);
    return `{"kvlistValue":{"values":[${kv.join(",")}]}}`;
  }
  return "{}";
}

function base64(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s);
}
