// A pod's runtime spans reach the collector through its agent (issue 15.1): the runtime as a pod
// runs it (the image's entrypoint, from its startup snapshot) with RUNTIME_TRACING=agent, as the kubernetes driver sets
// it with --pod-runtime-tracing, keeps its spans; the agent's collector (controllers/agent/pod-spans.ts,
// the agent's own tracer to a real OpenTelemetry Collector, tools/otelcol) pulls them with the
// sandbox's token and forwards only the spans of requests its ingress handed that sandbox, named
// by the agent. Nothing in the pod connects out, so this is also how a governed pod is traced.
// What a pod answers is the tenant's to write: the refusals below are the attack tests.
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, request, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createIngress, ENVD_PORT } from "../../controllers/agent/ingress.ts";
import { PodSpanCollector } from "../../controllers/agent/pod-spans.ts";
import { createRuntime } from "../../controllers/runtime/runtime.ts";
import { ingressKey, SIGNATURE_HEADER, signIngress } from "../../schema/ingress/signature.ts";
import { flushTraces, forwardSpans, startTracing } from "../../controllers/lib/tracing.ts";
import { RUNTIME_SPANS_PATH } from "../../schema/protocol/runtime-spans.ts";
import { startCollector, type Collector } from "../support/otel-collector.ts";
import { waitFor } from "../support/wait-for.ts";
import { startPodRuntime, type PodRuntime } from "./support/pod-runtime.ts";

const ROOT = join(import.meta.dirname, "../..");
const dir = join(ROOT, ".cache", `runtime-pod-spans-${process.pid}`);
const collectorDir = mkdtempSync(join(tmpdir(), "sbx-pod-spans-"));
const TOKEN = "pod-spans-token";
let collector: Collector;
let runtime: PodRuntime;
let stopTracing: () => Promise<void>;
let hostile: Server | undefined;

const hex = (n: number) => Array.from({ length: n }, () => "0123456789abcdef"[Math.floor(Math.random() * 16)]).join("");
const traceparent = (trace: string, parent: string) => `00-${trace}-${parent}-01`;

beforeAll(async () => {
  collector = await startCollector(collectorDir);
  stopTracing = startTracing({ endpoint: collector.endpoint, serviceName: "sandbox-agent" });
  runtime = await startPodRuntime(dir, { snapshot: true, env: { RUNTIME_TRACING: "agent", RUNTIME_ACCESS_TOKEN: TOKEN } });
}, 120_000);

afterAll(async () => {
  hostile?.close();
  await stopTracing?.();
  await runtime?.stop();
  await collector?.stop();
  rmSync(collectorDir, { recursive: true, force: true });
});

function agentFor(url: string, token = TOKEN): PodSpanCollector {
  return new PodSpanCollector({ runtimeOf: () => ({ url, token }), forward: forwardSpans });
}

describe("a pod runtime's spans, collected by its agent", () => {
  it("a request the agent's ingress handed on is a span of its trace, forwarded by the agent under the sandbox it pulled from", async () => {
    const agent = agentFor(runtime.url);
    const [trace, parent] = [hex(32), hex(16)];
    agent.handed("sbx-pulled", traceparent(trace, parent));
    const res = await fetch(new URL("/health", runtime.url), { headers: { traceparent: traceparent(trace, parent) } });
    expect(res.status).toBeLessThan(300);
    // The span ends when the answer is done; the agent pulls about once a second.
    await waitFor(async () => (await agent.pull("sbx-pulled")).forwarded === 1 || undefined, 10_000);
    await flushTraces();
    const span = await waitFor(() => collector.spans().find((s) => s.traceId === trace), 20_000);
    expect(span).toMatchObject({ name: "GET /health", parentSpanId: parent, service: "agent-runtime", scope: "agent-runtime" });
    // The agent names the sandbox, not the runtime (whose own name for itself is "default").
    expect(span.attributes["sandbox.id"]).toBe("sbx-pulled");
    expect(Number(span.attributes["http.response.status_code"])).toBe(res.status);
    agent.stop();
  });

  it("a request to a path with no route is a span too, so the agent does not wait for it in vain", async () => {
    const agent = agentFor(runtime.url);
    const [trace, parent] = [hex(32), hex(16)];
    agent.handed("sbx-noroute", traceparent(trace, parent));
    const res = await fetch(new URL("/no/such/route", runtime.url), { headers: { traceparent: traceparent(trace, parent), "x-access-token": TOKEN } });
    expect(res.status).toBe(404);
    await waitFor(async () => (await agent.pull("sbx-noroute")).forwarded === 1 || undefined, 10_000);
    expect(agent.waiting("sbx-noroute")).toBe(0);
    await flushTraces();
    const span = await waitFor(() => collector.spans().find((s) => s.traceId === trace), 20_000);
    expect(span).toMatchObject({ name: "GET (no route)", parentSpanId: parent });
    agent.stop();
  });

  it("refuses what it did not hand that sandbox: another trace's id, a made-up parent, a second copy", async () => {
    const agent = agentFor(runtime.url);
    const [mine, parent] = [hex(32), hex(16)];
    const [theirs, forged] = [hex(32), hex(16)];
    agent.handed("sbx-a", traceparent(mine, parent));
    // The tenant's code (it runs beside the runtime) makes requests under traceparents of its
    // choosing: a trace id it read elsewhere, a parent nobody handed.
    for (const tp of [traceparent(theirs, parent), traceparent(mine, forged), traceparent(mine, parent), traceparent(mine, parent)]) {
      expect((await fetch(new URL("/health", runtime.url), { headers: { traceparent: tp } })).status).toBeLessThan(300);
    }
    let got = { forwarded: 0, refused: 0 };
    await waitFor(async () => {
      const r = await agent.pull("sbx-a");
      got = { forwarded: got.forwarded + r.forwarded, refused: got.refused + r.refused };
      return got.forwarded + got.refused === 4 || undefined;
    }, 10_000);
    expect(got).toEqual({ forwarded: 1, refused: 3 });
    await flushTraces();
    await waitFor(() => collector.spans().find((s) => s.traceId === mine), 20_000);
    expect(collector.spans().filter((s) => s.traceId === mine)).toHaveLength(1);
    expect(collector.spans().some((s) => s.traceId === theirs)).toBe(false);
    agent.stop();
  });

  it("are the sandbox's: without its access token the runtime does not hand them over", async () => {
    expect((await fetch(new URL(RUNTIME_SPANS_PATH, runtime.url))).status).toBe(401);
    const agent = agentFor(runtime.url, "not-the-token");
    agent.handed("sbx-b", traceparent(hex(32), hex(16)));
    expect(await agent.pull("sbx-b")).toMatchObject({ forwarded: 0, error: "runtime answered 401" });
    agent.stop();
  });

  it("bounds what a pod answers: too large, or not the shape, and nothing is forwarded", async () => {
    let answer = "";
    hostile = createServer((req, res) => {
      req.resume();
      res.writeHead(200, { "content-type": "application/json" }).end(answer);
    });
    await new Promise<void>((r) => hostile!.listen(0, "127.0.0.1", r));
    const url = `http://127.0.0.1:${(hostile.address() as AddressInfo).port}`;
    const agent = agentFor(url);
    const [trace, parent] = [hex(32), hex(16)];
    const span = { traceId: trace, spanId: hex(16), parentSpanId: parent, name: "GET /health", startMs: 1, endMs: 2, status: 0, attributes: {} };
    agent.handed("sbx-c", traceparent(trace, parent));
    answer = JSON.stringify({ spans: [{ ...span, attributes: { pad: "x".repeat(200) } }], dropped: 0, pad: "x".repeat(300 * 1024) });
    expect(await agent.pull("sbx-c")).toMatchObject({ forwarded: 0, error: expect.stringMatching(/over 262144 bytes/) });
    answer = JSON.stringify({ spans: Array.from({ length: 300 }, () => span), dropped: 0 });
    expect(await agent.pull("sbx-c")).toMatchObject({ forwarded: 0, error: expect.stringMatching(/^not runtime spans/) });
    answer = JSON.stringify({ spans: [{ ...span, name: "x".repeat(129) }], dropped: 0 });
    expect(await agent.pull("sbx-c")).toMatchObject({ forwarded: 0, error: expect.stringMatching(/^not runtime spans/) });
    answer = "{not json";
    expect(await agent.pull("sbx-c")).toMatchObject({ forwarded: 0, error: "not JSON" });
    // The well-formed answer is taken (the handed parent was still waiting).
    answer = JSON.stringify({ spans: [span], dropped: 3 });
    expect(await agent.pull("sbx-c")).toEqual({ forwarded: 1, refused: 0, dropped: 3 });
    agent.stop();
  });

  it("places what a pod answers: the agent's own span id, and times within the agent's window for the request", async () => {
    let answer = "";
    const pod = createServer((req, res) => {
      req.resume();
      res.writeHead(200, { "content-type": "application/json" }).end(answer);
    });
    await new Promise<void>((r) => pod.listen(0, "127.0.0.1", r));
    const agent = agentFor(`http://127.0.0.1:${(pod.address() as AddressInfo).port}`);
    try {
      const [trace, parent] = [hex(32), hex(16)];
      const handedAt = Date.now();
      agent.handed("sbx-d", traceparent(trace, parent));
      // The tenant's answer: a span that is its own parent (a loop in the trace's tree), dated
      // from 1970 to the year 2200.
      answer = JSON.stringify({ spans: [{ traceId: trace, spanId: parent, parentSpanId: parent, name: "GET /health", startMs: 1, endMs: 7_258_118_400_000, status: 0, attributes: {} }], dropped: 0 });
      expect(await agent.pull("sbx-d")).toMatchObject({ forwarded: 1, refused: 0 });
      const pulledBy = Date.now();
      await flushTraces();
      const span = await waitFor(() => collector.spans().find((s) => s.traceId === trace), 20_000);
      expect(span.parentSpanId).toBe(parent);
      expect(span.spanId).toMatch(/^[0-9a-f]{16}$/);
      expect(span.spanId).not.toBe(parent);
      expect(span.startMs).toBeGreaterThanOrEqual(handedAt);
      expect(span.endMs).toBeLessThanOrEqual(pulledBy);
      expect(span.endMs).toBeGreaterThanOrEqual(span.startMs);
    } finally {
      agent.stop();
      pod.close();
    }
  });

  it("through the agent's ingress: a signed request to the pod is traced ingress → runtime, and the spans path is not the caller's", async () => {
    const CLUSTER = "pod-spans-cluster-token";
    const agent = agentFor(runtime.url);
    const ingress = await createIngress({ clusterToken: CLUSTER, runtime: createRuntime(), userPortTarget: () => undefined, remoteRuntime: () => runtime.url, podSpans: agent });
    await new Promise<void>((r) => ingress.listen(0, "127.0.0.1", r));
    const base = `http://127.0.0.1:${(ingress.address() as AddressInfo).port}`;
    const key = await ingressKey(CLUSTER);
    const signed = async (path: string, headers: Record<string, string> = {}) =>
      fetch(base + path, { headers: { ...headers, "e2b-sandbox-id": "sbxingress", "e2b-sandbox-port": String(ENVD_PORT), "x-access-token": TOKEN, [SIGNATURE_HEADER]: await signIngress(key, { sandboxId: "sbxingress", port: ENVD_PORT, method: "GET", pathAndQuery: path }, Date.now()) } });
    try {
      const [trace, caller] = [hex(32), hex(16)];
      expect((await signed("/health", { traceparent: traceparent(trace, caller) })).status).toBeLessThan(300);
      await waitFor(async () => (await agent.pull("sbxingress")).forwarded === 1 || undefined, 10_000);
      await flushTraces();
      const [ing, rt] = await waitFor(() => {
        const spans = collector.spans().filter((s) => s.traceId === trace);
        const i = spans.find((s) => s.name === "ingress");
        const r = spans.find((s) => s.service === "agent-runtime");
        return i && r ? ([i, r] as const) : undefined;
      }, 20_000);
      expect(ing).toMatchObject({ parentSpanId: caller, service: "sandbox-agent" });
      expect(rt).toMatchObject({ name: "GET /health", parentSpanId: ing.spanId });
      expect(rt.attributes["sandbox.id"]).toBe("sbxingress");
      // Signed by the edge or not, a caller may not read or drain the runtime's spans.
      expect((await signed(RUNTIME_SPANS_PATH)).status).toBe(404);
      // Nor under another spelling that the runtime's URL parsing makes the same path (fetch
      // would normalise these itself, so they go raw).
      const raw = async (path: string) => {
        const headers = { "e2b-sandbox-id": "sbxingress", "e2b-sandbox-port": String(ENVD_PORT), "x-access-token": TOKEN, [SIGNATURE_HEADER]: await signIngress(key, { sandboxId: "sbxingress", port: ENVD_PORT, method: "GET", pathAndQuery: path }, Date.now()) };
        return new Promise<number>((done, fail) => {
          request(base + "/", { path, headers }, (res) => {
            res.resume();
            done(res.statusCode ?? 0);
          }).on("error", fail).end();
        });
      };
      for (const path of ["/agent/./spans", "/x/../agent/spans", "/agent/%2e/spans", "/agent/%2E%2e/agent/spans"]) {
        expect(await raw(path), path).toBe(404);
      }
    } finally {
      agent.stop();
      ingress.closeAllConnections();
      await new Promise((r) => ingress.close(r));
    }
  });

  it("through the agent's ingress: a request that never reached the runtime, or a preflight, is not waited for", async () => {
    const CLUSTER = "pod-spans-cluster-token";
    // A port nothing listens on: the pod refuses the connection.
    const gone = createServer();
    await new Promise<void>((r) => gone.listen(0, "127.0.0.1", r));
    const goneUrl = `http://127.0.0.1:${(gone.address() as AddressInfo).port}`;
    await new Promise((r) => gone.close(r));
    const agent = agentFor(runtime.url);
    const ingress = await createIngress({ clusterToken: CLUSTER, runtime: createRuntime(), userPortTarget: () => undefined, remoteRuntime: (id) => (id === "sbxgone" ? goneUrl : runtime.url), podSpans: agent });
    await new Promise<void>((r) => ingress.listen(0, "127.0.0.1", r));
    const base = `http://127.0.0.1:${(ingress.address() as AddressInfo).port}`;
    const key = await ingressKey(CLUSTER);
    const signed = async (id: string, method: string) =>
      fetch(base + "/health", { method, headers: { traceparent: traceparent(hex(32), hex(16)), "e2b-sandbox-id": id, "e2b-sandbox-port": String(ENVD_PORT), [SIGNATURE_HEADER]: await signIngress(key, { sandboxId: id, port: ENVD_PORT, method, pathAndQuery: "/health" }, Date.now()) } });
    try {
      expect((await signed("sbxgone", "GET")).status).toBe(502);
      expect(agent.waiting("sbxgone")).toBe(0);
      expect((await signed("sbxpreflight", "OPTIONS")).status).toBe(204);
      expect(agent.waiting("sbxpreflight")).toBe(0);
    } finally {
      agent.stop();
      ingress.closeAllConnections();
      await new Promise((r) => ingress.close(r));
    }
  });
});
