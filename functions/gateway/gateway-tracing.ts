// A data-plane request's id and span. Every gateway answer carries `X-Request-Id`, the request's
// trace id (the caller's, when it sent a traceparent), as the control plane's do (functions/
// tracing.ts). Traced, the request is a server span `gateway` whose context `forward` hands the
// agent's ingress as the request's traceparent, so the ingress and the runtime join the trace.
// With tracing off no span object exists: the id is the caller's trace id or a random one.
import type { Context } from "hono";
import { flushEdgeTraces, startRequestSpan } from "../../durable-objects/tracing/edge-tracing.ts";
import type { AppEnv } from "../env.ts";
import { REQUEST_ID_HEADER } from "../tracing.ts";
import type { GatewayTarget } from "./target.ts";

/** Bound on the path kept as a span attribute (it is the tenant's: data, never interpreted). */
const PATH_ATTRIBUTE_MAX = 256;

export async function traceGateway(c: Context<AppEnv>, url: URL, target: GatewayTarget, work: (requestId: string) => Promise<Response>): Promise<Response> {
  const req = startRequestSpan(c.env, "gateway", c.req.header("traceparent") ?? null);
  // Off, nothing reads a context (no span; the caller's traceparent passes through as it came),
  // so the work does not enter one: that alone was measurable per command.
  let res = req.span ? await req.run(() => work(req.id)) : await work(req.id);
  // The ingress's answers carry it already (forward sends it along); setting a fetched response's
  // immutable headers would throw, which cost workerd more than the rest of a forward.
  if (res.headers.get(REQUEST_ID_HEADER) !== req.id) {
    try {
      // The gateway's own answers and a Connect stream's (re-framed) are new responses.
      res.headers.set(REQUEST_ID_HEADER, req.id);
    } catch {
      // A fetched response's headers are immutable: copied, bar a WebSocket upgrade's.
      if (res.status !== 101) {
        res = new Response(res.body, res);
        res.headers.set(REQUEST_ID_HEADER, req.id);
      }
    }
  }
  if (!req.span) return res;
  req.span.setAttributes({
    "sandbox.id": target.sandboxId,
    "sandbox.port": target.port,
    "http.request.method": c.req.method,
    "url.path": url.pathname.slice(0, PATH_ATTRIBUTE_MAX),
    "http.response.status_code": res.status,
  });
  // Ends with the answer's head: a stream (a command's output) goes on after it.
  req.span.end();
  const flushing = flushEdgeTraces();
  if (flushing) c.executionCtx.waitUntil(flushing);
  return res;
}
