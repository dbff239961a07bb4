// The runtime as a pod runs it (the bundle through start.cjs), with OTEL_EXPORTER_OTLP_ENDPOINT on
// its container as the kubernetes driver sets it from the agent's tracing config: its requests are
// spans received by a real OpenTelemetry Collector (tools/otelcol), each a child of the
// traceparent the agent's ingress handed on, so the pod's runtime joins the request's trace.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundleRuntime, RUNTIME_NODE_FLAGS } from "../../controllers/runtime/bundle.ts";
import { ENVD_VERSION } from "../../controllers/runtime/version.ts";
import { startCollector, type Collector } from "../support/otel-collector.ts";
import { waitFor } from "../support/wait-for.ts";

const ROOT = join(import.meta.dirname, "../..");
// Inside the checkout, as dist/runtime is in the image: the external add-ons resolve from the
// node_modules above it.
const dir = join(ROOT, ".cache", `runtime-pod-tracing-${process.pid}`);
const collectorDir = mkdtempSync(join(tmpdir(), "sbx-pod-trace-"));
let collector: Collector;
let runtime: ChildProcess;
let runtimeUrl: string;
let api: Server;
let stderr = "";

const TRACE = "5bf92f3577b34da6a3ce929d0e0e4736";
const PARENT = "11f067aa0ba902b7";

beforeAll(async () => {
  mkdirSync(dir, { recursive: true });
  collector = await startCollector(collectorDir);
  const bundle = await bundleRuntime(join(dir, "main.cjs"));
  runtime = spawn(process.execPath, [...RUNTIME_NODE_FLAGS, join(dir, "start.cjs"), "--port", "0", "--host", "127.0.0.1"], {
    cwd: "/",
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, MALLOC_ARENA_MAX: "2", OTEL_EXPORTER_OTLP_ENDPOINT: collector.endpoint },
  });
  runtime.stderr!.on("data", (d) => void (stderr += String(d)));
  runtimeUrl = await new Promise<string>((res, rej) => {
    runtime.stdout!.on("data", (d) => {
      const m = /listening on (http:\/\/\S+)/.exec(String(d));
      if (m) res(m[1]!);
    });
    runtime.once("exit", (code) => rej(new Error(`runtime exited ${code}: ${stderr}`)));
  });
  expect(bundle).toContain("main.cjs");
}, 120_000);

afterAll(async () => {
  if (runtime && runtime.exitCode === null) {
    const exited = new Promise((r) => runtime.once("exit", r));
    runtime.kill("SIGTERM");
    await exited;
  }
  api?.close();
  await collector?.stop();
  rmSync(dir, { recursive: true, force: true });
  rmSync(collectorDir, { recursive: true, force: true });
});

describe("a pod's runtime with a collector configured", () => {
  it("records each request as a span of its caller's trace (the traceparent the agent's ingress hands on)", async () => {
    const res = await fetch(new URL("/health", runtimeUrl), { headers: { traceparent: `00-${TRACE}-${PARENT}-01` } });
    expect(res.status).toBeLessThan(300);
    const span = await waitFor(() => collector.spans().find((s) => s.traceId === TRACE), 20_000);
    expect(span).toMatchObject({ name: "GET /health", parentSpanId: PARENT, service: "agent-runtime", scope: "agent-runtime" });
    expect(Number(span.attributes["http.response.status_code"])).toBe(res.status);
  });

  it("a command run through the SDK is a span named by its RPC", async () => {
    api = createServer((req, res) => {
      req.resume();
      req.on("end", () => res.writeHead(201, { "content-type": "application/json" }).end(JSON.stringify({ sandboxID: "pod-tracing", templateID: "base", clientID: "test", envdVersion: ENVD_VERSION })));
    });
    await new Promise<void>((r) => api.listen(0, "127.0.0.1", r));
    const sbx = await Sandbox.create("base", { apiKey: `e2b_${"0".repeat(40)}`, apiUrl: `http://127.0.0.1:${(api.address() as AddressInfo).port}`, sandboxUrl: runtimeUrl });
    const r = await sbx.commands.run("echo traced");
    expect(r.stdout.trim()).toBe("traced");
    await waitFor(() => collector.spans().some((s) => s.name === "process.Process/Start" && s.service === "agent-runtime"), 20_000);
  });
});
