// OTLP/JSON text of ended spans, one span at a time: what @opentelemetry/otlp-transformer's
// JsonTraceSerializer makes of the same ReadableSpans (field for field: test/unit/otlp-json.test.ts
// parses both and compares), for the edge, which encodes each span as it ends and keeps only the
// text until its export (durable-objects/tracing/edge-tracing.ts). The transformer builds an
// object per span, attribute and value, then the whole request's tree, then stringifies it: in
// workerd that, with the spans kept as objects until the export, was about half of what tracing
// cost per create (bench/edge-ab.ts --profile). Spans with events or links are not encoded here
// (the edge records neither).
import type { AttributeValue, HrTime } from "@opentelemetry/api";
import type { InstrumentationScope } from "@opentelemetry/core";
import type { Resource } from "@opentelemetry/resources";
import type { ReadableSpan } from "@opentelemetry/sdk-trace";

const q = JSON.stringify;

/** An HrTime as the transformer writes it: nanoseconds since the epoch, as a decimal string. */
function nanos([s, ns]: HrTime): string {
  const sec = Math.trunc(s);
  const frac = Math.trunc(ns);
  if (!sec) return String(frac);
  return `${sec}${String(frac).padStart(9, "0")}`;
}

function anyValue(value: unknown): string {
  switch (typeof value) {
    case "string":
      return `{"stringValue":${q(value)}}`;
    case "number":
      return Number.isInteger(value) ? `{"intValue":${q(value)}}` : `{"doubleValue":${q(value)}}`;
    case "boolean":
      return `{"boolValue":${value}}`;
  }
  if (Array.isArray(value)) return `{"arrayValue":{"values":[${value.map(anyValue).join(",")}]}}`;
  if (value !== null && typeof value === "object") return `{"kvlistValue":{"values":[${keyValues(value as Record<string, unknown>)}]}}`;
  return "{}";
}

function keyValues(attributes: Record<string, unknown>): string {
  let out = "";
  for (const key of Object.keys(attributes)) out += `${out ? "," : ""}{"key":${q(key)},"value":${anyValue(attributes[key] as AttributeValue)}}`;
  return out;
}

/** One span's OTLP/JSON object. */
export function otlpSpanJson(span: ReadableSpan): string {
  const ctx = span.spanContext();
  const parent = span.parentSpanContext;
  const status = span.status;
  const flags = (ctx.traceFlags & 0xff) | 0x100 | (parent?.isRemote ? 0x200 : 0);
  return (
    `{"traceId":${q(ctx.traceId)},"spanId":${q(ctx.spanId)}` +
    (parent?.spanId ? `,"parentSpanId":${q(parent.spanId)}` : "") +
    (ctx.traceState ? `,"traceState":${q(ctx.traceState.serialize())}` : "") +
    `,"name":${q(span.name)},"kind":${span.kind == null ? 0 : span.kind + 1}` +
    `,"startTimeUnixNano":"${nanos(span.startTime)}","endTimeUnixNano":"${nanos(span.endTime)}"` +
    `,"attributes":[${keyValues(span.attributes)}],"droppedAttributesCount":${span.droppedAttributesCount}` +
    `,"events":[],"droppedEventsCount":${span.droppedEventsCount}` +
    `,"status":{"code":${status.code}${status.message === undefined ? "" : `,"message":${q(status.message)}`}}` +
    `,"links":[],"droppedLinksCount":${span.droppedLinksCount},"flags":${flags}}`
  );
}

/** The request around the spans of one resource and scope: `head + spans.join(",") + TAIL`. */
export function otlpRequestHead(resource: Resource, scope: InstrumentationScope): string {
  const res = `{"attributes":[${keyValues(resource.attributes)}],"droppedAttributesCount":0${resource.schemaUrl ? `,"schemaUrl":${q(resource.schemaUrl)}` : ""}}`;
  const sc = `{"name":${q(scope.name)}${scope.version === undefined ? "" : `,"version":${q(scope.version)}`}}`;
  return `{"resourceSpans":[{"resource":${res},"scopeSpans":[{"scope":${sc},"spans":[`;
}
export const OTLP_REQUEST_TAIL = "]}]}]}";
