// A span whose work makes no span of its own (the API key check, a Durable Object call from the
// Worker) rides the request's AsyncLocalStorage scope (`leafSpan`) instead of opening one: it must
// still reach the collector as the request span's child, with the request's trace id and its error
// status, and the hop it makes must get its own traceparent (the callee's spans are its children).
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { currentTraceId, currentTraceparent, flushEdgeTraces, leafSpan, startRequestSpan } from "../../../durable-objects/tracing/edge-tracing.ts";

const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
const SAMPLED = `00-${TRACE}-00f067aa0ba902b7-01`;

interface OtlpSpan {
  name: string;
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  status: { code: number; message?: string };
}

let server: Server;
const received: OtlpSpan[] = [];
let env: { OTEL_EXPORTER_OTLP_ENDPOINT: string };

beforeAll(async () => {
  server = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk) => (body += chunk));
    req.on("end", () => {
      for (const rs of JSON.parse(body).resourceSpans) for (const ss of rs.scopeSpans) received.push(...ss.spans);
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  env = { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

describe("leafSpan", () => {
  it("exports the request span's child, failed when its work throws; the work runs in the request's scope", async () => {
    const req = startRequestSpan(env, "POST /sandboxes", SAMPLED);
    const seen = await req.run(() => leafSpan(env, "auth.api_key", { k: "v" }, async () => currentTraceId()));
    expect(seen).toBe(TRACE);
    await expect(req.run(() => leafSpan(env, "auth.failed", {}, async () => Promise.reject(new Error("Invalid API key"))))).rejects.toThrow("Invalid API key");
    req.span!.end();
    await flushEdgeTraces();
    const root = received.find((s) => s.name === "POST /sandboxes");
    const leaf = received.find((s) => s.name === "auth.api_key");
    const failed = received.find((s) => s.name === "auth.failed");
    expect(root?.parentSpanId).toBe("00f067aa0ba902b7");
    expect(leaf).toMatchObject({ traceId: TRACE, parentSpanId: root!.spanId, status: { code: 0 } });
    expect(failed).toMatchObject({ traceId: TRACE, parentSpanId: root!.spanId, status: { code: 2, message: "Invalid API key" } });
  });

  it("hands on its own traceparent without becoming the current span; in an unsampled request, the request's as it came", async () => {
    received.length = 0;
    const req = startRequestSpan(env, "POST /sandboxes", SAMPLED);
    const seen = await req.run(() => leafSpan(env, "TeamQuotaDO.create", {}, async (traceparent) => ({ handed: traceparent(), current: currentTraceparent(), id: currentTraceId() })));
    req.span!.end();
    await flushEdgeTraces();
    const leaf = received.find((s) => s.name === "TeamQuotaDO.create");
    expect(seen.handed).toBe(`00-${TRACE}-${leaf!.spanId}-01`);
    expect(seen.current).toBe(`00-${TRACE}-${req.span!.spanContext().spanId}-01`);
    expect(seen.id).toBe(TRACE);

    received.length = 0;
    const unsampled = SAMPLED.replace(/01$/, "00");
    const off = startRequestSpan(env, "POST /sandboxes", unsampled);
    expect(await off.run(() => leafSpan(env, "TeamQuotaDO.create", {}, async (traceparent) => traceparent()))).toBe(unsampled);
    await flushEdgeTraces();
    expect(received).toEqual([]);
  });
});
