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

/** The spans of an OTLP/protobuf ExportTraceServiceRequest: the fields checked here (trace.proto's numbers). */
function otlpSpans(body: Uint8Array): OtlpSpan[] {
  const spans: OtlpSpan[] = [];
  for (const rs of messages(body, 1)) for (const ss of messages(rs, 2)) for (const sp of messages(ss, 2)) {
    const one = fieldsOf(sp);
    const hex = (n: number) => (one.get(n)?.[0] ? Buffer.from(one.get(n)![0] as Uint8Array).toString("hex") : undefined);
    const status = fieldsOf(one.get(15)![0] as Uint8Array);
    const message = status.get(2)?.[0] as Uint8Array | undefined;
    spans.push({ name: Buffer.from(one.get(5)![0] as Uint8Array).toString(), traceId: hex(1)!, spanId: hex(2)!, parentSpanId: hex(4), status: { code: (status.get(3)?.[0] as number) ?? 0, ...(message ? { message: Buffer.from(message).toString() } : {}) } });
  }
  return spans;
}
const messages = (data: Uint8Array, field: number) => (fieldsOf(data).get(field) ?? []) as Uint8Array[];
function fieldsOf(data: Uint8Array): Map<number, Array<number | Uint8Array>> {
  const out = new Map<number, Array<number | Uint8Array>>();
  let pos = 0;
  const varint = () => {
    let v = 0;
    for (let scale = 1; ; scale *= 128) {
      const b = data[pos++]!;
      v += (b & 127) * scale;
      if (b < 128) return v;
    }
  };
  while (pos < data.length) {
    const key = varint();
    const [field, wire] = [Math.floor(key / 8), key & 7];
    const length = wire === 2 ? varint() : wire === 1 ? 8 : 4;
    const value = wire === 0 ? varint() : data.subarray(pos, (pos += length));
    out.set(field, [...(out.get(field) ?? []), value]);
  }
  return out;
}

let server: Server;
const received: OtlpSpan[] = [];
let requests = 0;
let env: { OTEL_EXPORTER_OTLP_ENDPOINT: string };

beforeAll(async () => {
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      expect(req.headers["content-type"]).toBe("application/x-protobuf");
      requests++;
      received.push(...otlpSpans(Buffer.concat(chunks)));
      res.writeHead(200, { "content-type": "application/x-protobuf" }).end(); // an empty ExportTraceServiceResponse
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

  it("ends the span as an awaited promise would: for work that throws before handing back a promise, and for a thenable (an RPC's)", async () => {
    received.length = 0;
    const req = startRequestSpan(env, "POST /sandboxes", SAMPLED);
    const thrown = req.run(() =>
      leafSpan(env, "throws.sync", {}, () => {
        throw new Error("bad argument");
      }),
    );
    await expect(thrown).rejects.toThrow("bad argument");
    const thenable = { then: (resolve: (v: string) => void) => void setTimeout(() => resolve("answered"), 1) } as unknown as Promise<string>;
    expect(await req.run(() => leafSpan(env, "rpc.thenable", {}, () => thenable))).toBe("answered");
    const rejecting = { then: (_: unknown, reject: (e: Error) => void) => void reject(new Error("rpc failed")) } as unknown as Promise<string>;
    await expect(req.run(() => leafSpan(env, "rpc.rejects", {}, () => rejecting))).rejects.toThrow("rpc failed");
    req.span!.end();
    await flushEdgeTraces();
    const root = received.find((s) => s.name === "POST /sandboxes")!;
    expect(received.find((s) => s.name === "throws.sync")).toMatchObject({ parentSpanId: root.spanId, status: { code: 2, message: "bad argument" } });
    expect(received.find((s) => s.name === "rpc.thenable")).toMatchObject({ parentSpanId: root.spanId, status: { code: 0 } });
    expect(received.find((s) => s.name === "rpc.rejects")).toMatchObject({ parentSpanId: root.spanId, status: { code: 2, message: "rpc failed" } });
  });

  it("exports what a second buffered in one request", async () => {
    await flushEdgeTraces();
    received.length = 0;
    requests = 0;
    for (let i = 0; i < 3000; i++) await leafSpan(env, `SandboxGroupDO.create ${i}`, { n: i }, async () => undefined, SAMPLED);
    await flushEdgeTraces();
    expect(received).toHaveLength(3000);
    expect(new Set(received.map((s) => s.name)).size).toBe(3000);
    expect(requests).toBe(1);
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

  it("a hop from inside a Durable Object call handed a traceparent is a span of that trace, its child; unsampled or off, the hop gets the traceparent as it came", async () => {
    received.length = 0;
    // Outside any request's scope, as in a Durable Object's call (TeamQuotaDO.claim's hop to PoolDO).
    const handed = await leafSpan(env, "PoolDO.claim", {}, async (traceparent) => traceparent(), SAMPLED);
    await flushEdgeTraces();
    const hop = received.find((s) => s.name === "PoolDO.claim");
    expect(hop).toMatchObject({ traceId: TRACE, parentSpanId: "00f067aa0ba902b7" });
    expect(handed).toBe(`00-${TRACE}-${hop!.spanId}-01`);
    await expect(leafSpan(env, "ClusterDO.enqueue", {}, async () => Promise.reject(new Error("cluster gone")), SAMPLED)).rejects.toThrow("cluster gone");
    await flushEdgeTraces();
    expect(received.find((s) => s.name === "ClusterDO.enqueue")).toMatchObject({ traceId: TRACE, parentSpanId: "00f067aa0ba902b7", status: { code: 2, message: "cluster gone" } });

    received.length = 0;
    const unsampled = SAMPLED.replace(/01$/, "00");
    expect(await leafSpan(env, "PoolDO.claim", {}, async (traceparent) => traceparent(), unsampled)).toBe(unsampled);
    expect(await leafSpan({}, "PoolDO.claim", {}, async (traceparent) => traceparent(), SAMPLED)).toBe(SAMPLED);
    await flushEdgeTraces();
    expect(received).toEqual([]);
  });
});
