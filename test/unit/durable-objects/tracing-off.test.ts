// Tracing is off unless a collector is configured, and off costs no span anywhere: the edge keeps
// only the request id (the caller's trace id, or a fresh one) and hands it on as a traceparent (so
// the agent's log lines for the request's work carry it); no tracer, nothing to export. The
// agent's tracer is the API's no-op one and a frame's traceparent is not even parsed.
import { trace } from "@opentelemetry/api";
import { describe, expect, it } from "vitest";
import { parentFrom, tracingOn as agentTracingOn, withSpan } from "../../../controllers/lib/tracing.ts";
import { currentTraceId, currentTraceparent, edgeSpan, flushEdgeTraces, startRequestSpan, tracingOn } from "../../../durable-objects/tracing/edge-tracing.ts";

const CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

describe("tracing off (no OTEL_EXPORTER_OTLP_ENDPOINT, no --otlp-endpoint)", () => {
  it("the edge records no span, keeps the request id and hands on the caller's traceparent as it came", async () => {
    const env = {};
    expect(tracingOn(env)).toBe(false);
    const req = startRequestSpan(env, "POST /v2/sandboxes", CALLER);
    expect(req.span).toBeNull();
    const seen = await req.run(() => edgeSpan(env, "SandboxGroupDO.create", {}, async () => ({ id: currentTraceId(), traceparent: currentTraceparent() })));
    expect(seen).toEqual({ id: "4bf92f3577b34da6a3ce929d0e0e4736", traceparent: CALLER });
    expect(flushEdgeTraces()).toBeUndefined();
  });

  it("without a caller's traceparent, the request id travels in one of its own, through a Durable Object call to the next hop", async () => {
    const env = {};
    const req = startRequestSpan(env, "POST /sandboxes", null);
    const handed = await req.run(async () => currentTraceparent());
    expect(handed).toMatch(new RegExp(`^00-${req.id}-[0-9a-f]{16}-01$`));
    expect(await req.run(async () => currentTraceparent())).toBe(handed); // one per request
    // Inside another object's call, handed that traceparent (as TeamQuotaDO hands it on to SandboxGroupDO).
    const inside = await edgeSpan(env, "SandboxGroupDO.create", {}, async () => ({ id: currentTraceId(), traceparent: currentTraceparent() }), handed);
    expect(inside).toEqual({ id: req.id, traceparent: handed });
    // Outside any request (an alarm's own work) there is none.
    expect(currentTraceparent()).toBeUndefined();
  });

  it("the agent's spans are the API's no-op ones and an intent's traceparent is not parsed", async () => {
    expect(agentTracingOn()).toBe(false);
    const ctx = parentFrom(CALLER);
    expect(trace.getSpan(ctx)).toBeUndefined();
    const inside = await withSpan("reconcile", ctx, {}, async (c) => trace.getSpan(c)?.isRecording() ?? false);
    expect(inside).toBe(false);
  });
});
