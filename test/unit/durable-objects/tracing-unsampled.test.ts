// Tracing on, a caller's traceparent flagged not sampled: the edge samples parent-based (as the
// SDK's default sampler and W3C's sampled flag ask), so nothing of the request is recorded, and
// since session 19 no span object is made either: the request and each Durable Object call it
// makes run as with tracing off (the request id is the caller's trace id, and every hop gets the
// caller's traceparent as it came). bench/edge-ab.ts --same-process rests on this: it measures
// sampled against unsampled creates on one traced process.
import { describe, expect, it } from "vitest";
import { currentTraceId, currentTraceparent, edgeSpan, startRequestSpan } from "../../../durable-objects/tracing/edge-tracing.ts";

const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
const UNSAMPLED = `00-${TRACE}-00f067aa0ba902b7-00`;
const SAMPLED = `00-${TRACE}-00f067aa0ba902b7-01`;
const env = { OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:9" };

describe("tracing on, an unsampled caller", () => {
  it("makes no span for the request or its Durable Object calls; the id and the traceparent go on as they came", async () => {
    const req = startRequestSpan(env, "POST /sandboxes", UNSAMPLED);
    expect(req.id).toBe(TRACE);
    expect(req.span).toBeNull();
    // A call in the request (the key check's span, a SandboxGroupDO call) and, in another object,
    // a call handed the request's traceparent (TeamQuotaDO hands it on to SandboxGroupDO).
    const seen = await req.run(() =>
      edgeSpan(env, "auth.api_key", {}, async () => ({ id: currentTraceId(), traceparent: currentTraceparent() })),
    );
    expect(seen).toEqual({ id: TRACE, traceparent: UNSAMPLED });
    const inside = await edgeSpan(env, "SandboxGroupDO.create", {}, async () => ({ id: currentTraceId(), traceparent: currentTraceparent() }), seen.traceparent);
    expect(inside).toEqual({ id: TRACE, traceparent: UNSAMPLED });
  });

  it("a sampled caller's request is still a recorded span, and its calls its children", async () => {
    const req = startRequestSpan(env, "POST /sandboxes", SAMPLED);
    expect(req.id).toBe(TRACE);
    expect(req.span?.isRecording()).toBe(true);
    const handed = await req.run(() => edgeSpan(env, "auth.api_key", {}, async () => currentTraceparent()));
    expect(handed).toMatch(new RegExp(`^00-${TRACE}-[0-9a-f]{16}-01$`));
    expect(handed).not.toBe(SAMPLED);
    req.span!.end();
  });
});
