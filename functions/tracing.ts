// Request tracing: every control-plane request gets an id, its trace id, echoed in `X-Request-Id`
// (from the caller's `traceparent` when it sent one), so a user's report leads to the trace. With
// OTEL_EXPORTER_OTLP_ENDPOINT set the request is a server span (route, status), the key check a
// child span, and each Durable Object call one more (durable-objects/tracing/edge-tracing.ts).
import type { MiddlewareHandler } from "hono";
import { routePath } from "hono/route";
import { flushEdgeTraces, leafSpan, spanRecorded, startRequestSpan } from "../durable-objects/tracing/edge-tracing.ts";
import type { AppEnv } from "./env.ts";

export const REQUEST_ID_HEADER = "X-Request-Id";

export function traceRequests(): MiddlewareHandler<AppEnv> {
  return async function traceRequest(c, next) {
    const req = startRequestSpan(c.env, c.req.method, c.req.header("traceparent") ?? null);
    await req.run(() => next());
    try {
      c.res.headers.set(REQUEST_ID_HEADER, req.id);
    } catch {
      // an immutable response (a WebSocket upgrade): it has no id to show
    }
    if (!req.span) return;
    const route = routePath(c) || "unmatched";
    req.span.updateName(`${c.req.method} ${route}`);
    req.span.setAttributes({ "http.request.method": c.req.method, "http.route": route, "http.response.status_code": c.res.status });
    req.span.end();
    const flushing = flushEdgeTraces();
    if (flushing) c.executionCtx.waitUntil(flushing);
  };
}

/**
 * A middleware's own work as a span (what it hands to `next` is not part of it). The span does not
 * become the current one (`leafSpan`): a traced middleware makes no hop or span of its own.
 */
export function traced(name: string, mw: MiddlewareHandler<AppEnv>): MiddlewareHandler<AppEnv> {
  return async function tracedMiddleware(c, next) {
    // Off, an unsampled request (no span: as off, without the wrapper), or a second run for the
    // same request (two mounted patterns match `/sandboxes`).
    if (c.get("caller") || !spanRecorded(c.env)) return mw(c, next);
    let downstream: Promise<void> | undefined;
    const out = await leafSpan(c.env, name, {}, () =>
      mw(c, () => {
        downstream = Promise.resolve();
        return downstream;
      }),
    );
    if (downstream) await next();
    return out;
  };
}
