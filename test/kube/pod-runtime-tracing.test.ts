// The whole agent with --pod-runtime-tracing (issue 15): `main.ts --driver kubernetes
// --otlp-endpoint … --pod-runtime-tracing` as an operator starts it, the test kubelet making its
// pods Ready and running each pod's agent-runtime with the runtime container's environment as the
// driver wrote it, the edge tracing to the same real OpenTelemetry Collector. A command run with
// the unmodified e2b SDK is one trace from the edge's gateway through the agent's ingress to the
// pod's runtime, whose span reached the collector through the agent, named by it. No kubelet here
// starts containers: the runtime runs on the host, as the kube tier's e2e test runs it.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { startCollector, type Collector, type ReceivedSpan } from "../support/otel-collector.ts";
import { startTestEdge, type TestEdge } from "./support/edge.ts";
import { runRuntimes } from "./support/kube-agent.ts";
import { TestKubelet } from "./support/kubelet.ts";
import { freshNamespace, kubeConfig, until } from "./support/namespace.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const CLUSTER = "kube-podtrace";
const collectorDir = mkdtempSync(join(tmpdir(), "sbx-kube-podtrace-"));
let collector: Collector;
let edge: TestEdge;
let ns: string;
let kubelet: TestKubelet;
let runtimes: { stop(): Promise<void> };
let agent: ReturnType<typeof spawn> | undefined;
let agentOut = "";

beforeAll(async () => {
  collector = await startCollector(collectorDir);
  edge = await startTestEdge("podtrace", { vars: { OTEL_EXPORTER_OTLP_ENDPOINT: collector.endpoint } });
  ns = await freshNamespace("podtrace"); // the team's namespace
  kubelet = new TestKubelet(kubeConfig(), ns);
  await kubelet.start();
  runtimes = await runRuntimes(ns);
  agent = spawn(
    join(ROOT, "node_modules/.bin/node"),
    ["controllers/agent/main.ts", "--driver", "kubernetes", "--kubeconfig", inject("kube").agentKubeconfig, "--namespace", ns, "--cluster", CLUSTER, "--edge", edge.url, "--data-dir", join(edge.dir, "agent"), "--otlp-endpoint", collector.endpoint, "--pod-runtime-tracing"],
    { cwd: ROOT, env: { ...process.env, CLUSTER_TOKEN: await edge.tokenOf(CLUSTER) }, stdio: ["ignore", "pipe", "pipe"] },
  );
  agent.stdout!.on("data", (b: Buffer) => (agentOut = (agentOut + b.toString()).slice(-20_000)));
  agent.stderr!.on("data", (b: Buffer) => (agentOut = (agentOut + b.toString()).slice(-20_000)));
  await until("agent connected", () => agentOut.includes("connected to the edge"), 60_000);
}, 240_000);

afterAll(async () => {
  if (agent && agent.exitCode === null) {
    const exited = new Promise((ok) => agent!.once("exit", ok));
    agent.kill("SIGTERM");
    await exited;
  }
  await runtimes?.stop();
  await kubelet?.stop();
  await edge?.stop();
  await collector?.stop();
  rmSync(collectorDir, { recursive: true, force: true });
});

describe("an agent started with --pod-runtime-tracing", () => {
  it("a command in a pod is one trace: the edge's gateway, the agent's ingress, and the pod's runtime span forwarded by the agent", async () => {
    const admin = { "x-api-key": edge.adminKey, "content-type": "application/json" };
    const put = await fetch(`${edge.url}/admin/teams/${ns}/templates/tools`, { method: "PUT", headers: admin, body: JSON.stringify({ spec: { cluster: CLUSTER, image: "python:3.12", replicas: 0 } }) });
    expect(put.ok).toBe(true);
    const key = ((await (await fetch(`${edge.url}/api-keys`, { method: "POST", headers: admin, body: JSON.stringify({ name: "podtrace", teamName: ns }) })).json()) as { key: string }).key;
    const sbx = await Sandbox.create("tools", { apiKey: key, apiUrl: edge.url, sandboxUrl: edge.url, requestTimeoutMs: 30_000 });
    try {
      expect((await sbx.commands.run("echo traced in a pod")).stdout).toContain("traced in a pod");
      // The agent pulls about once a second and exports in batches; the edge exports within a second.
      const [runtime, ingress, gateway] = await until("the command's runtime span under the ingress and the gateway", () => {
        const spans = collector.spans();
        const byId = new Map(spans.map((s) => [s.spanId, s]));
        const rt = spans.find((s) => s.service === "agent-runtime" && s.attributes["sandbox.id"] === sbx.sandboxId && s.name === "process.Process/Start");
        const ing = rt && byId.get(rt.parentSpanId);
        const gw = ing && byId.get(ing.parentSpanId);
        return rt && ing && gw ? ([rt, ing, gw] as [ReceivedSpan, ReceivedSpan, ReceivedSpan]) : undefined;
      }, 30_000);
      expect(ingress).toMatchObject({ name: "ingress", service: "sandbox-agent", traceId: runtime.traceId });
      expect(ingress.attributes["sandbox.id"]).toBe(sbx.sandboxId);
      expect(gateway).toMatchObject({ name: "gateway", service: "sandbox-edge", traceId: runtime.traceId });
      expect(runtime.scope).toBe("agent-runtime");
    } finally {
      await sbx.kill();
    }
  });
});
