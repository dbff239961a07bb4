// The edge's own span recorder hands the OTLP exporter what the SDK's span would: the same fields
// for the same calls (a child of a caller's traceparent, attributes set at the start and later, a
// renamed span, an error status), read side by side from a real @opentelemetry/sdk-trace span.
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { TracerProvider, type ReadableSpan } from "@opentelemetry/sdk-trace";
import { describe, expect, it } from "vitest";
import { EdgeSpan, flagsNotSampled, parseTraceparent, randomHex, traceFlags, traceparentOf } from "../../../lib/tracing/span-recorder.ts";

const CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const resource = resourceFromAttributes({ "service.name": "sandbox-edge" });

/** What the exporter reads of a span, ids and times aside. */
function exported(s: ReadableSpan) {
  return {
    name: s.name,
    kind: s.kind,
    traceId: s.spanContext().traceId,
    traceFlags: s.spanContext().traceFlags,
    parent: s.parentSpanContext && { spanId: s.parentSpanContext.spanId, isRemote: s.parentSpanContext.isRemote },
    attributes: s.attributes,
    status: s.status,
    links: s.links,
    events: s.events,
    ended: s.ended,
    scope: s.instrumentationScope.name,
    resource: s.resource.attributes,
    dropped: [s.droppedAttributesCount, s.droppedEventsCount, s.droppedLinksCount],
  };
}

function drive(span: { setAttribute(k: string, v: unknown): unknown; setAttributes(a: Record<string, unknown>): unknown; updateName(n: string): unknown; setStatus(s: { code: SpanStatusCode; message?: string }): unknown; end(): void }) {
  span.setAttribute("http.response.status_code", 503);
  span.setAttributes({ "sandbox.id": "abc", skipped: undefined });
  span.updateName("POST /v2/sandboxes");
  span.setStatus({ code: SpanStatusCode.ERROR, message: "no capacity" });
  span.end();
  span.setAttribute("after.end", 1);
}

describe("the edge's span recorder", () => {
  it("records what the SDK's span records for the same calls", () => {
    const sdkEnded: ReadableSpan[] = [];
    const provider = new TracerProvider({ resource, spanProcessors: [{ onStart() {}, onEnd: (s) => void sdkEnded.push(s), forceFlush: async () => {}, shutdown: async () => {} }] });
    const parent = new W3CTraceContextPropagator().extract(ROOT_CONTEXT, { traceparent: CALLER }, { get: (c, k) => c[k], keys: (c) => Object.keys(c) });
    drive(provider.getTracer("sandbox-edge").startSpan("POST", { kind: SpanKind.SERVER, attributes: { "pool.name": "p" } }, parent) as never);
    const ours: ReadableSpan[] = [];
    drive(new EdgeSpan({ resource, scope: { name: "sandbox-edge" }, onEnd: (s) => ours.push(s) }, "POST", SpanKind.SERVER, { "pool.name": "p" }, parseTraceparent(CALLER)));
    expect(ours).toHaveLength(1);
    expect(exported(ours[0]!)).toEqual(exported(sdkEnded[0]!));
    expect(ours[0]!.endTime[0] * 1e3 + ours[0]!.endTime[1] / 1e6).toBeGreaterThanOrEqual(ours[0]!.startTime[0] * 1e3 + ours[0]!.startTime[1] / 1e6);
  });

  it("keeps the attributes it is handed without changing them, and cleans them as the SDK does", () => {
    const sdkEnded: ReadableSpan[] = [];
    const provider = new TracerProvider({ resource, spanProcessors: [{ onStart() {}, onEnd: (s) => void sdkEnded.push(s), forceFlush: async () => {}, shutdown: async () => {} }] });
    const ours: ReadableSpan[] = [];
    const sink = { resource, scope: { name: "sandbox-edge" }, onEnd: (s: ReadableSpan) => ours.push(s) };
    const given = [{ "pool.name": "p", n: 1 }, { "pool.name": "p", gone: undefined, "": "empty key", n: 2 }];
    for (const attributes of given) {
      const handed = structuredClone(attributes);
      const theirs = provider.getTracer("sandbox-edge").startSpan("call", { attributes: attributes as never });
      const span = new EdgeSpan(sink, "call", SpanKind.INTERNAL, attributes as never, undefined);
      for (const s of [theirs, span]) {
        s.setAttribute("later", true);
        s.setAttributes({ n: 3 });
        s.end();
      }
      expect(attributes, "the object handed in").toEqual(handed);
    }
    expect(ours.map((s) => s.attributes)).toEqual(sdkEnded.map((s) => s.attributes));
    expect(ours.map((s) => s.attributes)).toEqual([{ "pool.name": "p", n: 3, later: true }, { "pool.name": "p", n: 3, later: true }]);
  });

  it("a root span starts a trace; a child of an unsampled parent records nothing, as the SDK's default sampler", () => {
    const ended: ReadableSpan[] = [];
    const sink = { resource, scope: { name: "sandbox-edge" }, onEnd: (s: ReadableSpan) => ended.push(s) };
    const root = new EdgeSpan(sink, "root", SpanKind.INTERNAL, undefined, undefined);
    expect(root.spanContext().traceId).toMatch(/^[0-9a-f]{32}$/);
    expect(root.parentSpanContext).toBeUndefined();
    const child = new EdgeSpan(sink, "child", SpanKind.INTERNAL, undefined, root.spanContext());
    expect(child.spanContext().traceId).toBe(root.spanContext().traceId);
    expect(traceparentOf(child.spanContext())).toBe(`00-${root.spanContext().traceId}-${child.spanContext().spanId}-01`);
    const unsampled = new EdgeSpan(sink, "quiet", SpanKind.INTERNAL, undefined, parseTraceparent(CALLER.replace(/01$/, "00")));
    expect(unsampled.isRecording()).toBe(false);
    child.end();
    unsampled.end();
    root.end();
    expect(ended.map((s) => s.name)).toEqual(["child", "root"]);
    // The SDK's own tracer agrees on the unsampled parent.
    const sdk = new TracerProvider({ resource }).getTracer("x").startSpan("quiet", {}, trace.setSpanContext(ROOT_CONTEXT, parseTraceparent(CALLER.replace(/01$/, "00"))!));
    expect(sdk.isRecording()).toBe(false);
  });

  it("parses only a well-formed, non-zero version-00 traceparent", () => {
    expect(parseTraceparent(CALLER)).toEqual({ traceId: "4bf92f3577b34da6a3ce929d0e0e4736", spanId: "00f067aa0ba902b7", traceFlags: 1, isRemote: true });
    for (const bad of ["", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", `00-${"0".repeat(32)}-00f067aa0ba902b7-01`, `00-4bf92f3577b34da6a3ce929d0e0e4736-${"0".repeat(16)}-01`, "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", `${CALLER}x`]) {
      expect(parseTraceparent(bad), bad).toBeUndefined();
    }
  });

  it("makes ids of lowercase hex, every digit at every position", () => {
    const sink = { resource, scope: { name: "sandbox-edge" }, onEnd() {} };
    const makers: Array<[number, () => string]> = [
      [16, () => randomHex(16)],
      [32, () => randomHex(32)],
      [16, () => new EdgeSpan(sink, "s", SpanKind.INTERNAL, undefined, undefined).spanContext().spanId],
      [32, () => new EdgeSpan(sink, "s", SpanKind.INTERNAL, undefined, undefined).spanContext().traceId],
    ];
    for (const [chars, make] of makers) {
      const seen = Array.from({ length: chars }, () => new Set<string>());
      const ids = new Set<string>();
      for (let i = 0; i < 2000; i++) {
        const id = make();
        expect(id).toMatch(new RegExp(`^[0-9a-f]{${chars}}$`));
        ids.add(id);
        for (let k = 0; k < chars; k++) seen[k]!.add(id[k]!);
      }
      expect(ids.size).toBe(2000);
      expect(seen.map((s) => s.size)).toEqual(new Array(chars).fill(16));
    }
  });

  it("reads every one-character change of a traceparent as the W3C grammar does", () => {
    // The grammar as a regular expression (what parseTraceparent used until session 23), beside the
    // one-pass reader each Durable Object call runs: a change anywhere, to any character class
    // (hex either case, a dash, a zero, the sampled flag, a non-ASCII character), reads the same.
    const grammar = (tp: string) => /^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/.test(tp) && tp.slice(3, 35) !== "0".repeat(32) && tp.slice(36, 52) !== "0".repeat(16);
    let read = 0;
    for (const base of [CALLER, CALLER.replace(/01$/, "00"), `00-${"0".repeat(31)}1-${"0".repeat(15)}1-00`]) {
      for (let i = 0; i <= base.length; i++) {
        for (const ch of ["0", "1", "9", "a", "f", "g", "A", "F", "-", " ", "é", "\u0100", ""]) {
          const tp = base.slice(0, i) + ch + base.slice(i + 1);
          const flags = traceFlags(tp);
          expect(flags >= 0, tp).toBe(grammar(tp));
          if (flags >= 0) {
            read++;
            expect(flags, tp).toBe(parseInt(tp.slice(53), 16));
            expect(flagsNotSampled(flags), tp).toBe((parseInt(tp.slice(53), 16) & 1) === 0);
            expect(parseTraceparent(tp)).toEqual({ traceId: tp.slice(3, 35), spanId: tp.slice(36, 52), traceFlags: flags, isRemote: true });
          } else expect(parseTraceparent(tp), tp).toBeUndefined();
        }
      }
    }
    expect(read).toBeGreaterThan(500);
  });
});
