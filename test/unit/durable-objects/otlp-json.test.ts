// The edge writes OTLP/JSON straight from its spans' fields (lib/tracing/otlp-json.ts): the
// collector must get what the ecosystem's JsonTraceSerializer writes for the same spans, every
// field (ids, parent, kind, times, attributes of each type, status, flags, resource, scope).
import { SpanKind, SpanStatusCode } from "@opentelemetry/api";
import { JsonTraceSerializer } from "@opentelemetry/otlp-transformer";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { describe, expect, it } from "vitest";
import { otlpJsonSerializer } from "../../../lib/tracing/otlp-json.ts";
import { EdgeSpan, parseTraceparent, type SpanSink } from "../../../lib/tracing/span-recorder.ts";

const CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

function spansOf(sink: Omit<SpanSink, "onEnd">): EdgeSpan[] {
  const ended: EdgeSpan[] = [];
  const s = { ...sink, onEnd: (span: EdgeSpan) => void ended.push(span) };
  const request = new EdgeSpan(s, "POST /sandboxes", SpanKind.SERVER, { "http.request.method": "POST", "url.path": "/sandboxes" }, parseTraceparent(CALLER));
  const call = new EdgeSpan(s, "TeamQuotaDO.create", SpanKind.INTERNAL, { "team.id": "t-1", "sandbox.count": 3 }, request.spanContext());
  call.setAttributes({
    ratio: 0.25,
    huge: 2 ** 60,
    negative: -7,
    ok: true,
    off: false,
    quoted: 'say "hi"\n\t\\ \u2028 é 🚀 \u0001',
    empty: "",
    strings: ["a", "b\"c"],
    numbers: [1, 2.5, -3],
    flags: [true, false],
    none: [],
    holes: [null, "x", undefined] as never,
  });
  call.setStatus({ code: SpanStatusCode.ERROR, message: "no capacity: \"pool\" empty" });
  call.end();
  const ok = new EdgeSpan(s, "PoolDO.claim", SpanKind.CLIENT, undefined, call.spanContext());
  ok.setStatus({ code: SpanStatusCode.OK });
  ok.end();
  const emptyMessage = new EdgeSpan(s, "SandboxGroupDO.create", SpanKind.PRODUCER, { n: 0 }, call.spanContext());
  emptyMessage.setStatus({ code: SpanStatusCode.ERROR, message: "" });
  emptyMessage.end();
  const root = new EdgeSpan(s, "PoolDO.enqueue", SpanKind.CONSUMER, { "pool.name": "p\u00e9" }, undefined);
  root.end();
  request.end();
  return ended;
}

function both(spans: EdgeSpan[], resource = spans[0]!.resource, scope = spans[0]!.instrumentationScope) {
  const ours = JSON.parse(new TextDecoder().decode(otlpJsonSerializer(resource, scope).serializeRequest(spans.map((s) => s.otlpJson()))));
  const theirs = JSON.parse(new TextDecoder().decode(JsonTraceSerializer.serializeRequest(spans)!));
  return { ours, theirs };
}

describe("OTLP/JSON written from the edge's span fields", () => {
  it("is what JsonTraceSerializer writes for the same spans, field for field", () => {
    const spans = spansOf({ resource: resourceFromAttributes({ "service.name": "sandbox-edge" }), scope: { name: "sandbox-edge" } });
    expect(spans).toHaveLength(5);
    const { ours, theirs } = both(spans);
    expect(ours).toStrictEqual(theirs);
    // The comparison covers what it claims: a remote parent, a local one, none, and each value type.
    const written = theirs.resourceSpans[0].scopeSpans[0].spans as Array<Record<string, unknown>>;
    expect(written.map((s) => [s.name, s.parentSpanId, s.flags, s.kind])).toEqual([
      ["TeamQuotaDO.create", spans[0]!.parentSpanContext!.spanId, 0x101, 1 + SpanKind.INTERNAL],
      ["PoolDO.claim", spans[1]!.parentSpanContext!.spanId, 0x101, 1 + SpanKind.CLIENT],
      ["SandboxGroupDO.create", spans[2]!.parentSpanContext!.spanId, 0x101, 1 + SpanKind.PRODUCER],
      ["PoolDO.enqueue", undefined, 0x101, 1 + SpanKind.CONSUMER],
      ["POST /sandboxes", "00f067aa0ba902b7", 0x301, 1 + SpanKind.SERVER],
    ]);
    expect(JSON.stringify(written[0]!.attributes)).toContain('"doubleValue":0.25');
    expect(written[0]!.startTimeUnixNano).toMatch(/^[1-9]\d{18}$/);
  });

  it("carries a resource's and a scope's every field as the serializer does", () => {
    const resource = resourceFromAttributes({ "service.name": "sandbox-edge", "service.instance.id": "i-1", "host.cores": 2 });
    const scope = { name: "sandbox-edge", version: "1.2.3", schemaUrl: "https://opentelemetry.io/schemas/1.30.0" };
    const spans = spansOf({ resource, scope });
    const { ours, theirs } = both(spans, resource, scope);
    expect(ours).toStrictEqual(theirs);
    expect(theirs.resourceSpans[0].scopeSpans[0].scope).toEqual({ name: "sandbox-edge", version: "1.2.3" });
  });

  it("writes the times of a span that ends in a later millisecond exactly", async () => {
    const spans = spansOf({ resource: resourceFromAttributes({}), scope: { name: "x" } });
    await new Promise((r) => setTimeout(r, 3));
    const late = new EdgeSpan({ resource: spans[0]!.resource, scope: spans[0]!.instrumentationScope, onEnd: (s) => void spans.push(s) }, "late", SpanKind.INTERNAL, undefined, undefined);
    await new Promise((r) => setTimeout(r, 3));
    late.end();
    const { ours, theirs } = both(spans);
    expect(ours).toStrictEqual(theirs);
    const span = ours.resourceSpans[0].scopeSpans[0].spans.at(-1);
    expect(BigInt(span.endTimeUnixNano) - BigInt(span.startTimeUnixNano)).toBeGreaterThanOrEqual(2_000_000n);
  });
});
