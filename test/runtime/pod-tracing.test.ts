// The runtime as a pod runs it (the image's entrypoint, from its startup snapshot), with
// OTEL_EXPORTER_OTLP_ENDPOINT on its container as the kubernetes driver sets it from the agent's
// tracing config: its requests are spans received by a real OpenTelemetry Collector (tools/otelcol), each a child of the
// traceparent the agent's ingress handed on, so the pod's runtime joins the request's trace.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startCollector, type Collector } from "../support/otel-collector.ts";
import { waitFor } from "../support/wait-for.ts";
import { sandboxAt, startPodRuntime, type PodRuntime } from "./support/pod-runtime.ts";

const ROOT = join(import.meta.dirname, "../..");
const dir = join(ROOT, ".cache", `runtime-pod-tracing-${process.pid}`);
const collectorDir = mkdtempSync(join(tmpdir(), "sbx-pod-trace-"));
let collector: Collector;
let runtime: PodRuntime;
let closeApi: (() => void) | undefined;

const TRACE = "5bf92f3577b34da6a3ce929d0e0e4736";
const PARENT = "11f067aa0ba902b7";

beforeAll(async () => {
  collector = await startCollector(collectorDir);
  runtime = await startPodRuntime(dir, { snapshot: true, env: { OTEL_EXPORTER_OTLP_ENDPOINT: collector.endpoint } });
}, 120_000);

afterAll(async () => {
  closeApi?.();
  await runtime?.stop();
  await collector?.stop();
  rmSync(collectorDir, { recursive: true, force: true });
});

describe("a pod's runtime with a collector configured", () => {
  it("records each request as a span of its caller's trace (the traceparent the agent's ingress hands on)", async () => {
    const res = await fetch(new URL("/health", runtime.url), { headers: { traceparent: `00-${TRACE}-${PARENT}-01` } });
    expect(res.status).toBeLessThan(300);
    const span = await waitFor(() => collector.spans().find((s) => s.traceId === TRACE), 20_000);
    expect(span).toMatchObject({ name: "GET /health", parentSpanId: PARENT, service: "agent-runtime", scope: "agent-runtime" });
    expect(Number(span.attributes["http.response.status_code"])).toBe(res.status);
  });

  it("a command run through the SDK is a span named by its RPC", async () => {
    const bound = await sandboxAt(runtime.url, "pod-tracing");
    closeApi = bound.close;
    const sbx = bound.sbx;
    const r = await sbx.commands.run("echo traced");
    expect(r.stdout.trim()).toBe("traced");
    await waitFor(() => collector.spans().some((s) => s.name === "process.Process/Start" && s.service === "agent-runtime"), 20_000);
  });
});
