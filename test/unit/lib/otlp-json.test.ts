// The edge's own OTLP/JSON encoding (lib/tracing/otlp-json.ts) is the OpenTelemetry transformer's:
// the same spans through @opentelemetry/otlp-transformer's JsonTraceSerializer (what the OTLP/HTTP
// exporter sends) and through ours parse to the same request. And its export keeps the OTLP
// exporter's retry rules (edge-tracing.ts postOtlp).
import { SpanKind, SpanStatusCode } from "@opentelemetry/api";
import { JsonTraceSerializer } from "@opentelemetry/otlp-transformer";
import { resourceFromAttributes } from "@opentelemetry/resources";
import type { ReadableSpan } from "@opentelemetry/sdk-trace";
import { describe, expect, it, vi } from "vitest";
import { postOtlp } from "../../../durable-objects/tracing/edge-tracing.ts";
import { OTLP_REQUEST_TAIL, otlpRequestHead, otlpSpanJson } from "../../../lib/tracing/otlp-json.ts";
import { EdgeSpan, parseTraceparent, type SpanSink } from "../../../lib/tracing/span-recorder.ts";

function spans(): ReadableSpan[] {
  // Times with a few ms past the second (their nanoseconds need leading zeros).
  vi.useFakeTimers({ toFake: ["Date"], now: 1_700_000_000_005 });
  const ended: ReadableSpan[] = [];
  const sink: SpanSink = { resource: resourceFromAttributes({ "service.name": "sandbox-edge", "deployment.zone": 3 }), scope: { name: "sandbox-edge" }, onEnd: (s) => ended.push(s) };
  const root = new EdgeSpan(sink, "POST /sandboxes", SpanKind.SERVER, { "http.request.method": "POST", "http.response.status_code": 201 }, undefined);
  const child = new EdgeSpan(sink, "TeamQuotaDO.create", SpanKind.INTERNAL, { "team.id": 'q"uote\\ \u2028 ü', ratio: 0.25, ok: true, list: ["a", "b"], nums: [1, 2.5], big: 2 ** 53, neg: -1 }, root.spanContext());
  child.setStatus({ code: SpanStatusCode.ERROR, message: "quota: \"no\"\n" });
  child.end();
  const remote = new EdgeSpan(sink, "ClusterDO.enqueue", SpanKind.CLIENT, {}, parseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
  remote.setStatus({ code: SpanStatusCode.OK });
  vi.setSystemTime(1_700_000_000_042);
  remote.end();
  root.end();
  vi.useRealTimers();
  return ended;
}

describe("the edge's OTLP/JSON", () => {
  it("is what the OpenTelemetry transformer sends for the same spans", () => {
    const all = spans();
    expect(all).toHaveLength(3);
    const theirs = JSON.parse(new TextDecoder().decode(JsonTraceSerializer.serializeRequest(all)));
    const ours = JSON.parse(otlpRequestHead(all[0]!.resource, all[0]!.instrumentationScope) + all.map(otlpSpanJson).join(",") + OTLP_REQUEST_TAIL);
    expect(ours).toEqual(theirs);
    // What is compared: every span with its ids, times, attributes, status and flags.
    expect(ours.resourceSpans[0].scopeSpans[0].spans).toHaveLength(3);
  });
});

describe("the edge's export", () => {
  const answer = (status: number, headers: Record<string, string> = {}) => new Response("{}", { status, headers });
  function fakeFetch(answers: (Response | Error)[]) {
    const calls: number[] = [];
    const impl = (async () => {
      calls.push(Date.now());
      const a = answers.shift()!;
      if (a instanceof Error) throw a;
      return a;
    }) as unknown as typeof fetch;
    return { impl, calls };
  }

  it("tries again after a retryable answer (429, 502, 503, 504) or a network error, as the OTLP exporter does, honouring Retry-After", async () => {
    const f = fakeFetch([answer(503, { "retry-after": "0" }), new TypeError("fetch failed"), answer(429, { "retry-after": "0" }), answer(200)]);
    // The network error waits the backoff (~1 s); the others their Retry-After (now).
    expect(await postOtlp("http://collector/v1/traces", "{}", f.impl)).toBe("success");
    expect(f.calls).toHaveLength(4);
  }, 10_000);

  it("does not try again after any other answer", async () => {
    for (const status of [400, 401, 404, 500]) {
      const f = fakeFetch([answer(status), answer(200)]);
      expect(await postOtlp("http://collector/v1/traces", "{}", f.impl)).toBe("failure");
      expect(f.calls).toHaveLength(1);
    }
  });

  it("gives up after five retries", async () => {
    const f = fakeFetch(Array.from({ length: 7 }, () => answer(503, { "retry-after": "0" })));
    expect(await postOtlp("http://collector/v1/traces", "{}", f.impl)).toBe("retryable");
    expect(f.calls).toHaveLength(6);
  });
});
