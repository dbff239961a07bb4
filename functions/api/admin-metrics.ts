// GET /admin/metrics (admin key): the edge's Prometheus metrics, summed over isolates by
// EdgeMetricsDO (durable-objects/metrics/edge-metrics.ts says why and what it costs), and the
// middleware that counts the control plane's requests: route pattern, method, status, latency,
// and the E2B error code of each error response.
import { Hono, type MiddlewareHandler } from "hono";
import { routePath } from "hono/route";
import { ApiError } from "../api-error.ts";
import { requireAdmin } from "../auth/middleware.ts";
import type { AppEnv } from "../env.ts";
import { EDGE } from "../../durable-objects/metrics/families.ts";
import { countEvent, flushDue, flushNow, metricsStub, observeMs } from "../../durable-objects/metrics/edge-metrics.ts";
import { CONTENT_TYPE, renderPrometheus } from "./metrics-text.ts";

/** Counts each control-plane request (mounted after the gateway: data-plane traffic is not counted here). */
export function measureRequests(): MiddlewareHandler<AppEnv> {
  return async function measure(c, next) {
    const started = Date.now();
    await next();
    const route = routePath(c) || "unmatched";
    const method = c.req.method;
    countEvent(EDGE.httpRequests, { route, method, status: String(c.res.status) });
    observeMs(EDGE.httpDuration, { route, method }, Date.now() - started);
    if (c.error) countEvent(EDGE.errors, { code: c.error instanceof ApiError ? c.error.code : "internal" });
    const flushing = flushDue(c.env);
    if (flushing) c.executionCtx.waitUntil(flushing);
  };
}

export const adminMetrics = new Hono<AppEnv>();
adminMetrics.use("/admin/metrics", requireAdmin());

adminMetrics.get("/admin/metrics", async (c) => {
  // This isolate's own counts go in first; other isolates' are at most FLUSH_MS behind.
  await flushNow(c.env);
  const totals = await metricsStub(c.env).snapshot();
  return c.body(await renderPrometheus(totals), 200, { "content-type": CONTENT_TYPE });
});
