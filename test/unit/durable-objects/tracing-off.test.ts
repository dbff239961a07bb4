// Tracing is off unless a collector is configured, and off costs no span anywhere: the edge keeps
// only the request id (the caller's trace id, or a fresh one); no tracer, no traceparent handed on,
// nothing to export. The agent's tracer is the API's no-op one and a frame's traceparent is not
// even parsed.
import { trace } from "@opentelemetry/api";
import { describe, expect, it } from "vitest";
import { parentFrom, tracingOn as agentTracingOn, withSpan } from "../../../controllers/lib/tracing.ts";
import { currentTraceId, currentTraceparent, edgeSpan, flushEdgeTraces, startRequestSpan, tracingOn } from "../../../durable-objects/tracing/edge-tracing.ts";

const CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

describe("tracing off (no OTEL_EXPORTER_OTLP_ENDPOINT, no --otlp-endpoint)", () => {
  it("the edge records no span and hands on no traceparent, but keeps the request id", async () => {
    const env = {};
    expect(tracingOn(env)).toBe(false);
    const req = startRequestSpan(env, "POST /v2/sandboxes", CALLER);
    expect(req.span).toBeNull();
    const seen = await req.run(() => edgeSpan(env, "SandboxGroupDO.create", {}, async () => ({ id: currentTraceId(), traceparent: currentTraceparent() })));
    expect(seen).toEqual({ id: "4bf92f3577b34da6a3ce929d0e0e4736", traceparent: undefined });
    expect(flushEdgeTraces()).toBeUndefined();
  });

  it("the agent's spans are the API's no-op ones and an intent's traceparent is not parsed", async () => {
    expect(agentTracingOn()).toBe(false);
    const ctx = parentFrom(CALLER);
    expect(trace.getSpan(ctx)).toBeUndefined();
    const inside = await withSpan("reconcile", ctx, {}, async (c) => trace.getSpan(c)?.isRecording() ?? false);
    expect(inside).toBe(false);
  });
});
