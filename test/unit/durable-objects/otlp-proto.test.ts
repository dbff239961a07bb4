// The edge writes OTLP/protobuf straight from its spans' fields (lib/tracing/otlp-proto.ts): the
// collector must get the bytes the ecosystem's ProtobufTraceSerializer writes for the same spans,
// every field (ids, parent, kind, times, attributes of each type, status, flags, resource, scope).
import { SpanKind, SpanStatusCode } from "@opentelemetry/api";
import { JsonTraceSerializer, ProtobufTraceSerializer } from "@opentelemetry/otlp-transformer";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { afterEach, describe, expect, it, vi } from "vitest";
import { EncodedSpans, ProtoWriter, otlpProtoSerializer } from "../../../lib/tracing/otlp-proto.ts";
import { EdgeSpan, parseTraceparent, type SpanSink } from "../../../lib/tracing/span-recorder.ts";

const CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

type Sink = Omit<SpanSink, "onEnd">;

function sinkInto(sink: Sink, ended: EdgeSpan[]): SpanSink {
  return { ...sink, onEnd: (span: EdgeSpan) => void ended.push(span) };
}

/** A create's spans and more: every parent (remote, local, none), kind, value type and status. */
function spansOf(sink: Sink): EdgeSpan[] {
  const ended: EdgeSpan[] = [];
  const s = sinkInto(sink, ended);
  const request = new EdgeSpan(s, "POST /sandboxes", SpanKind.SERVER, { "http.request.method": "POST", "url.path": "/sandboxes" }, parseTraceparent(CALLER));
  const call = new EdgeSpan(s, "TeamQuotaDO.create", SpanKind.INTERNAL, { "team.id": "t-1", "sandbox.count": 3 }, request.spanContext());
  call.setAttributes({
    ratio: 0.25,
    huge: 2 ** 60,
    big: 2 ** 40 + 3,
    uint32: 0xffff_ffff,
    negative: -7,
    hugeNegative: -(2 ** 52) - 1,
    beyondInt64: 2 ** 64,
    ok: true,
    off: false,
    quoted: 'say "hi"\n\t\\ \u2028 é 🚀 \u0001',
    empty: "",
    strings: ["a", 'b"c', "ü"],
    numbers: [1, 2.5, -3],
    flags: [true, false],
    none: [],
    holes: [null, "x", undefined] as never,
  });
  call.setStatus({ code: SpanStatusCode.ERROR, message: 'no capacity: "pool" empty' });
  call.end();
  const ok = new EdgeSpan(s, "PoolDO.claim", SpanKind.CLIENT, undefined, call.spanContext());
  ok.setStatus({ code: SpanStatusCode.OK });
  ok.end();
  const emptyMessage = new EdgeSpan(s, "SandboxGroupDO.create", SpanKind.PRODUCER, { n: 0 }, call.spanContext());
  emptyMessage.setStatus({ code: SpanStatusCode.ERROR, message: "" });
  emptyMessage.end();
  const root = new EdgeSpan(s, "PoolDO.enqueue", SpanKind.CONSUMER, { "pool.name": "p\u00e9" }, undefined);
  root.end();
  const tiny = new EdgeSpan(s, "x", SpanKind.INTERNAL, undefined, undefined); // under 128 bytes: a one-byte length
  tiny.end();
  request.end();
  return ended;
}

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

function both(spans: EdgeSpan[], resource = spans[0]!.resource, scope = spans[0]!.instrumentationScope) {
  return { ours: hex(otlpProtoSerializer(resource, scope).serializeRequest(spans)), theirs: hex(ProtobufTraceSerializer.serializeRequest(spans)!) };
}

afterEach(() => void vi.restoreAllMocks());

describe("OTLP/protobuf written from the edge's span fields", () => {
  it("is what ProtobufTraceSerializer writes for the same spans, byte for byte", () => {
    const spans = spansOf({ resource: resourceFromAttributes({ "service.name": "sandbox-edge" }), scope: { name: "sandbox-edge" } });
    const { ours, theirs } = both(spans);
    expect(ours).toBe(theirs);
    // The comparison covers what it claims: a remote parent, a local one, none, every kind.
    const json = JSON.parse(new TextDecoder().decode(JsonTraceSerializer.serializeRequest(spans)!));
    const written = json.resourceSpans[0].scopeSpans[0].spans as Array<Record<string, unknown>>;
    expect(written.map((s) => [s.name, s.parentSpanId, s.flags, s.kind])).toEqual([
      ["TeamQuotaDO.create", spans[0]!.parentSpanContext!.spanId, 0x101, 1 + SpanKind.INTERNAL],
      ["PoolDO.claim", spans[1]!.parentSpanContext!.spanId, 0x101, 1 + SpanKind.CLIENT],
      ["SandboxGroupDO.create", spans[2]!.parentSpanContext!.spanId, 0x101, 1 + SpanKind.PRODUCER],
      ["PoolDO.enqueue", undefined, 0x101, 1 + SpanKind.CONSUMER],
      ["x", undefined, 0x101, 1 + SpanKind.INTERNAL],
      ["POST /sandboxes", "00f067aa0ba902b7", 0x301, 1 + SpanKind.SERVER],
    ]);
    const values = JSON.stringify(written[0]!.attributes);
    for (const kind of ["doubleValue", "intValue", "boolValue", "stringValue", "arrayValue"]) expect(values).toContain(kind);
  });

  it("carries a resource's and a scope's every field as the serializer does", () => {
    const resource = resourceFromAttributes({ "service.name": "sandbox-edge", "service.instance.id": "i-1", "host.cores": 2 }, { schemaUrl: "https://opentelemetry.io/schemas/1.29.0" });
    const scope = { name: "sandbox-edge", version: "1.2.3", schemaUrl: "https://opentelemetry.io/schemas/1.30.0" };
    const spans = spansOf({ resource, scope });
    const { ours, theirs } = both(spans, resource, scope);
    expect(ours).toBe(theirs);
    expect(theirs).toContain(Buffer.from("1.29.0").toString("hex"));
    expect(theirs).toContain(Buffer.from("1.30.0").toString("hex"));
  });

  it("writes times exactly: later milliseconds, fractions of one, and the far future", async () => {
    const sink = { resource: resourceFromAttributes({}), scope: { name: "x" } };
    const spans = spansOf(sink);
    await new Promise((r) => setTimeout(r, 3));
    const late = new EdgeSpan(sinkInto(sink, spans), "late", SpanKind.INTERNAL, undefined, undefined);
    await new Promise((r) => setTimeout(r, 3));
    late.end();
    const clock = vi.spyOn(Date, "now");
    for (const ms of [1764855941123.456, 999.9999, 4102444800000.5, 2 ** 42 + 0.25]) {
      clock.mockReturnValue(ms);
      const span = new EdgeSpan(sinkInto(sink, spans), `at ${ms}`, SpanKind.INTERNAL, undefined, undefined);
      clock.mockReturnValue(ms + 1.5);
      span.end();
    }
    expect(spans.length).toBeGreaterThan(10);
    const { ours, theirs } = both(spans);
    expect(ours).toBe(theirs);
  });

  it("writes lengths of every size: a span past 16 KB, a request of a thousand spans", () => {
    const sink = { resource: resourceFromAttributes({ "service.name": "sandbox-edge" }), scope: { name: "sandbox-edge" } };
    const spans: EdgeSpan[] = [];
    const big = new EdgeSpan(sinkInto(sink, spans), "big", SpanKind.INTERNAL, { blob: "a".repeat(20_000), wide: "é".repeat(5_000) }, undefined);
    big.end();
    for (let i = 0; i < 170; i++) spans.push(...spansOf(sink));
    expect(spans.length).toBeGreaterThan(1000);
    const { ours, theirs } = both(spans);
    expect(ours.length).toBeGreaterThan(2 * 150_000);
    expect(ours).toBe(theirs);
  });

  it("grows its buffer wherever a span's fields reach its end", () => {
    // A span's fixed-size fields are written after one size check for each run of them: from every
    // starting size up to the spans' whole length, the buffer's first end falls on each of their
    // bytes in turn, and the bytes are the same as written into one large enough (the serializer's).
    const sink = { resource: resourceFromAttributes({ "service.name": "sandbox-edge" }), scope: { name: "sandbox-edge" } };
    const spans = spansOf(sink);
    const s = sinkInto(sink, spans);
    const long = new EdgeSpan(s, "n".repeat(130), SpanKind.CLIENT, { k: "v" }, parseTraceparent(CALLER));
    long.setStatus({ code: SpanStatusCode.ERROR, message: "m".repeat(200) }); // a status past 127 bytes: its length takes two
    long.end();
    const odd = new EdgeSpan(s, "odd kind", 7 as SpanKind, undefined, undefined); // a kind beyond the enum: a varint as any
    odd.setStatus({ code: 300 as SpanStatusCode });
    odd.end();
    const writeAll = (size: number) => {
      const w = new ProtoWriter(size);
      for (const span of spans) span.writeOtlpProto(w);
      return w.buf.slice(0, w.pos);
    };
    const whole = writeAll(1 << 16);
    const ours = hex(otlpProtoSerializer(sink.resource, sink.scope).serializeRequest([{ writeOtlpProto: (into) => into.raw(whole) }]));
    expect(ours).toBe(hex(ProtobufTraceSerializer.serializeRequest(spans)!));
    for (let size = 1; size <= whole.length; size++) expect(Buffer.compare(writeAll(size), whole), `starting at ${size} bytes`).toBe(0);
  });

  it("writes spans as they end (the edge's buffer) into the request the serializer writes for them at the export", () => {
    const sink = { resource: resourceFromAttributes({ "service.name": "sandbox-edge" }), scope: { name: "sandbox-edge" } };
    const batch = new EncodedSpans();
    const ended: EdgeSpan[] = [];
    const s: SpanSink = { ...sink, onEnd: (span) => (ended.push(span), batch.add(span)) };
    const request = new EdgeSpan(s, "POST", SpanKind.SERVER, undefined, parseTraceparent(CALLER));
    for (let i = 0; i < 200; i++) {
      const call = new EdgeSpan(s, `SandboxGroupDO.create ${i}`, SpanKind.INTERNAL, { "sandbox.id": `i${i}`, n: i }, request.spanContext());
      call.end();
      call.setAttribute("after.end", true); // ignored, as the serializer would see it at the export
    }
    request.updateName("POST /v2/sandboxes");
    request.setAttributes({ "http.response.status_code": 201 });
    request.end();
    expect(batch.count).toBe(201);
    const ours = hex(otlpProtoSerializer(sink.resource, sink.scope).serializeRequest([batch]));
    expect(ours).toBe(hex(ProtobufTraceSerializer.serializeRequest(ended)!));
  });

  it("writes nothing for no spans, and reads the collector's answer as the serializer does", () => {
    const serializer = otlpProtoSerializer(resourceFromAttributes({}), { name: "x" });
    expect(serializer.serializeRequest([])).toHaveLength(0);
    const answers = [
      "", // the usual answer: an empty ExportTraceServiceResponse
      "0a00", // an empty partial success
      "0a0c08031208c3a92072656a6563", // 3 spans rejected, "é rejec"
      "0a050880011200", // 128 rejected, an empty message
      "0a0308071d11223344", // a field it does not know (fixed32) after rejected_spans
      "1203616263", // an unknown length-delimited field at the top level
    ];
    for (const answer of answers) {
      const bytes = Uint8Array.from(Buffer.from(answer, "hex"));
      expect(serializer.deserializeResponse(bytes), answer).toStrictEqual(ProtobufTraceSerializer.deserializeResponse(bytes));
    }
    expect(serializer.deserializeResponse(Uint8Array.from(Buffer.from("0a0c08031208c3a92072656a6563", "hex")))).toStrictEqual({ partialSuccess: { rejectedSpans: 3, errorMessage: "é rejec" } });
  });
});
