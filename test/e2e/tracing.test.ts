// Traces over the whole local system, received by a real OpenTelemetry Collector (built from Go
// modules, tools/otelcol): a create and a resume are each one trace, whose id the edge echoes in
// X-Request-Id, spanning the edge's request, its Durable Object calls, the agent's reconcile and
// driver step, and the runtime's registration of the sandbox; a create's claim through TeamQuotaDO
// and PoolDO, a snapshot down to the driver's copy, and the calls on an update ops run too. The
// work nobody's request waits on is traced as well: an ops run's alarm steps (in the trace of its
// start), the pool's own creates (a trace of their own, down to the agent), and an intent the
// agent never acked, redelivered after the agent's restart (still in its request's trace). An ops
// run's agent-side work (its hooks, checkpoints and recreates) is in the run's trace, and a
// PoolAutoscaler's evaluation is a span whose scale's creates are its children. The data plane
// too: a command run through the SDK is one trace from the edge's gateway through the agent's
// ingress to the runtime, and a hook the edge runs in a sandbox is in its step's trace. A create
// whose caller's traceparent is flagged not sampled records nothing anywhere (parent-based sampling).
import { Sandbox } from "e2b";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSystem, type System } from "../../scripts/lib/system.ts";
import { startCollector, type Collector, type ReceivedSpan } from "../support/otel-collector.ts";
import { waitFor } from "../support/wait-for.ts";

let dir: string;
let collector: Collector;
let sys: System;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "sbx-trace-"));
  collector = await startCollector(dir);
  sys = await startSystem({ dataDir: join(dir, "system"), baseReplicas: 1, otlpEndpoint: collector.endpoint });
}, 900_000);

afterAll(async () => {
  await sys?.stop();
  await collector?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** The agent's JSON log lines (its output file). */
function agentLines(): Record<string, unknown>[] {
  return readFileSync(join(dir, "system", "agent.log"), "utf8")
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** A control-plane call as the SDK makes it (X-API-KEY), with its request id. */
async function api(method: string, path: string, body?: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${sys.apiUrl}${path}`, { method, headers: { "x-api-key": sys.apiKey, "content-type": "application/json", ...headers }, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, requestId: res.headers.get("x-request-id") ?? "", body: text ? JSON.parse(text) : null };
}

/** The trace's spans once the agent's runtime step has arrived. */
async function traceOf(traceId: string): Promise<ReceivedSpan[]> {
  return waitFor(() => {
    const spans = collector.spans().filter((s) => s.traceId === traceId);
    return spans.some((s) => s.scope === "agent-runtime") && spans.some((s) => s.service === "sandbox-edge" && s.name.startsWith("POST")) ? spans : undefined;
  }, 30_000);
}

/** The trace's spans once every one of `names` has arrived. */
async function spansNamed(traceId: string, names: string[]): Promise<ReceivedSpan[]> {
  return waitFor(() => {
    const spans = collector.spans().filter((s) => s.traceId === traceId);
    return names.every((n) => spans.some((s) => s.name === n)) ? spans : undefined;
  }, 30_000);
}

/** request → `doCall` (under `via` when given) → ClusterDO.enqueue → the agent's reconcile → driver and runtime. */
function expectChain(spans: ReceivedSpan[], request: string, doCall: string, via?: string) {
  const by = (name: string) => spans.find((s) => s.name === name);
  const root = by(request);
  expect(root, `${request} in ${spans.map((s) => s.name)}`).toMatchObject({ service: "sandbox-edge", parentSpanId: "" });
  expect(spans.find((s) => s.name === "auth.api_key")?.parentSpanId).toBe(root!.spanId);
  const parent = via ? by(via) : root;
  if (via) expect(parent?.parentSpanId).toBe(root!.spanId);
  const call = by(doCall);
  expect(call?.parentSpanId).toBe(parent!.spanId);
  const enqueue = by("ClusterDO.enqueue");
  expect(enqueue?.parentSpanId).toBe(call!.spanId);
  const reconcile = spans.find((s) => s.name === "reconcile" && s.parentSpanId === enqueue!.spanId);
  expect(reconcile).toMatchObject({ service: "sandbox-agent", scope: "sandbox-agent" });
  expect(spans.find((s) => s.name === "driver.ensure")?.parentSpanId).toBe(reconcile!.spanId);
  expect(spans.find((s) => s.name === "runtime.register")).toMatchObject({ scope: "agent-runtime", parentSpanId: reconcile!.spanId });
}

describe("traces", () => {
  it("a create is one trace from the edge's request through the agent to the runtime, its id in X-Request-Id", async () => {
    const created = await api("POST", "/v2/sandboxes", { templateID: "base" });
    expect(created.status).toBe(201);
    expect(created.requestId).toMatch(/^[0-9a-f]{32}$/);
    const spans = await spansNamed(created.requestId, ["POST /v2/sandboxes", "TeamQuotaDO.create", "SandboxGroupDO.create", "ClusterDO.enqueue", "reconcile", "driver.ensure", "runtime.register"]);
    // One Durable Object call from the Worker: the team's quota object, which claims from the pool
    // and hands the member to its group (both from inside that object).
    expectChain(spans, "POST /v2/sandboxes", "SandboxGroupDO.create", "TeamQuotaDO.create");
    expect(spans.find((s) => s.name === "reconcile")?.attributes["sandbox.id"]).toBe(created.body.sandboxID);
    const claim = await spansNamed(created.requestId, ["TeamQuotaDO.create", "PoolDO.claim"]);
    const quota = claim.find((s) => s.name === "TeamQuotaDO.create")!;
    expect(claim.find((s) => s.name === "PoolDO.claim")).toMatchObject({ service: "sandbox-edge", parentSpanId: quota.spanId, attributes: { "pool.name": expect.any(String) } });
    await api("DELETE", `/sandboxes/${created.body.sandboxID}`);
  });

  it("a create under an unsampled traceparent (-00) records nothing anywhere, and its id is still echoed", async () => {
    const random = () => [...crypto.getRandomValues(new Uint8Array(16))].map((b) => b.toString(16).padStart(2, "0")).join("");
    const quiet = random();
    const created = await api("POST", "/v2/sandboxes", { templateID: "base" }, { traceparent: `00-${quiet}-00f067aa0ba902b7-00` });
    expect(created.status).toBe(201);
    expect(created.requestId).toBe(quiet);
    // A sampled create after it: once its whole trace (down to the runtime) has arrived, whatever
    // the unsampled one would have exported, from the edge, the agent or the runtime, has too.
    const loud = random();
    const after = await api("POST", "/v2/sandboxes", { templateID: "base" }, { traceparent: `00-${loud}-00f067aa0ba902b7-01` });
    expect(after.status).toBe(201);
    await traceOf(loud);
    expect(collector.spans().filter((s) => s.traceId === quiet)).toEqual([]);
    await api("DELETE", `/sandboxes/${created.body.sandboxID}`);
    await api("DELETE", `/sandboxes/${after.body.sandboxID}`);
  });

  it("a resume (connect to a paused sandbox) is one trace too, under the caller's own traceparent; so are the pause and the kill", async () => {
    const created = await api("POST", "/v2/sandboxes", { templateID: "base" });
    const id = created.body.sandboxID as string;
    const paused = await api("POST", `/sandboxes/${id}/pause`, {});
    expect(paused.status).toBe(204);
    // The pause is a trace of its own down to the driver (the sandbox is not registered again).
    const pause = await spansNamed(paused.requestId, ["POST /sandboxes/:id/pause", "SandboxGroupDO.pause", "ClusterDO.enqueue", "reconcile", "driver.ensure"]);
    expect(pause.find((s) => s.name === "driver.ensure")?.attributes["sandbox.state"]).toBe("Paused");
    const traceId = [...crypto.getRandomValues(new Uint8Array(16))].map((b) => b.toString(16).padStart(2, "0")).join("");
    const resumed = await api("POST", `/v2/sandboxes/${id}/connect`, { timeout: 60 }, { traceparent: `00-${traceId}-00f067aa0ba902b7-01` });
    expect(resumed.status).toBe(201);
    expect(resumed.requestId).toBe(traceId);
    const spans = await traceOf(traceId);
    // The caller's span is the request span's parent: the trace joins the caller's.
    expect(spans.find((s) => s.name === "POST /v2/sandboxes/:id/connect")?.parentSpanId).toBe("00f067aa0ba902b7");
    expectChain(spans.map((s) => (s.parentSpanId === "00f067aa0ba902b7" ? { ...s, parentSpanId: "" } : s)), "POST /v2/sandboxes/:id/connect", "SandboxGroupDO.connectSandbox");
    expect(spans.find((s) => s.name === "reconcile")?.attributes["sandbox.desired"]).toBe("running");
    const killed = await api("DELETE", `/sandboxes/${id}`);
    expect(killed.status).toBe(204);
    await spansNamed(killed.requestId, ["DELETE /sandboxes/:id", "SandboxGroupDO.kill", "ClusterDO.enqueue", "reconcile", "driver.destroy"]);
    // The agent's log lines about the sandbox written during each traced step carry that step's
    // trace id, the kill's last line (phase Deleted) included.
    const phases = await waitFor(() => {
      const mine = agentLines().filter((l) => l.sandboxId === id && l.msg === "phase");
      return mine.some((l) => l.phase === "Deleted") ? mine : undefined;
    }, 15_000);
    expect(phases.find((l) => l.phase === "Paused")?.traceId).toBe(paused.requestId);
    expect(phases.find((l) => l.phase === "Running" && l.traceId === traceId)).toBeDefined();
    expect(phases.find((l) => l.phase === "Deleted")?.traceId).toBe(killed.requestId);
  });

  it("a snapshot is one trace from the request through the agent to the driver's copy", async () => {
    const created = await api("POST", "/v2/sandboxes", { templateID: "base" });
    const id = created.body.sandboxID as string;
    const snap = await api("POST", `/sandboxes/${id}/snapshots`, {});
    expect(snap.status).toBe(201);
    const spans = await spansNamed(snap.requestId, ["POST /sandboxes/:id/snapshots", "SandboxGroupDO.snapshot", "ClusterDO.enqueue", "reconcile", "driver.snapshotFs"]);
    const call = spans.find((s) => s.name === "SandboxGroupDO.snapshot")!;
    expect(call.parentSpanId).toBe(spans.find((s) => s.name === "POST /sandboxes/:id/snapshots")!.spanId);
    const enqueue = spans.find((s) => s.name === "ClusterDO.enqueue" && s.parentSpanId === call.spanId)!;
    const reconcile = spans.find((s) => s.name === "reconcile" && s.parentSpanId === enqueue.spanId)!;
    expect(spans.find((s) => s.name === "driver.snapshotFs")).toMatchObject({ service: "sandbox-agent", parentSpanId: reconcile.spanId, attributes: { "sandbox.id": id, "snapshot.id": expect.stringMatching(/^[a-z0-9]{20}$/) } });
    await api("DELETE", `/sandboxes/${id}`);
  });

  it("each call on an update ops run is a span of the request's trace", async () => {
    const name = `trace-${Date.now().toString(36)}`;
    const started = await api("POST", "/admin/teams/admin/updateops", { name, selector: { matchLabels: { none: "none" } }, paused: true });
    expect(started.status).toBe(201);
    const spans = await spansNamed(started.requestId, ["POST /admin/teams/:team/updateops", "UpdateOpsDO.start"]);
    expect(spans.find((s) => s.name === "UpdateOpsDO.start")).toMatchObject({ parentSpanId: spans.find((s) => s.name.startsWith("POST"))!.spanId, attributes: { "ops.name": name } });
    const removed = await api("DELETE", `/admin/teams/admin/updateops/${name}`);
    expect(removed.status).toBe(204);
    await spansNamed(removed.requestId, ["UpdateOpsDO.remove"]);
  });

  it("an ops run's alarm steps are spans of the trace of its start", async () => {
    const name = `trace-alarm-${Date.now().toString(36)}`;
    const started = await api("POST", "/admin/teams/admin/updateops", { name, selector: { matchLabels: { none: "none" } } });
    expect(started.status).toBe(201);
    const spans = await spansNamed(started.requestId, ["UpdateOpsDO.start", "UpdateOpsDO.alarm", "UpdateOpsDO.select"]);
    const start = spans.find((s) => s.name === "UpdateOpsDO.start")!;
    const alarm = spans.find((s) => s.name === "UpdateOpsDO.alarm")!;
    expect(alarm).toMatchObject({ parentSpanId: start.spanId, attributes: { "ops.name": name, "ops.phase": "Pending" } });
    expect(spans.find((s) => s.name === "UpdateOpsDO.select")?.parentSpanId).toBe(alarm.spanId);
    await api("DELETE", `/admin/teams/admin/updateops/${name}`);
  });

  it("an ops run's agent-side work is in the run's trace: its hooks, each member's checkpoint and its recreate down to the agent's reconcile and driver steps", async () => {
    const name = `trace-up-${Date.now().toString(36)}`;
    expect((await api("PUT", `/admin/teams/admin/templates/${name}`, { spec: { replicas: 0, memoryMB: 256 } })).status).toBeLessThan(300);
    const created = await api("POST", "/v2/sandboxes", { templateID: name, timeout: 600, metadata: { "label:up": name } });
    expect(created.status).toBe(201);
    const id = created.body.sandboxID as string;
    expect((await api("PUT", `/admin/teams/admin/templates/${name}`, { spec: { replicas: 0, memoryMB: 384 } })).status).toBeLessThan(300);
    const hook = { exec: { command: ["true"] }, timeoutSeconds: 30 };
    const started = await api("POST", "/admin/teams/admin/updateops", { name, selector: { matchLabels: { up: name } }, updateStrategy: { type: "CheckpointRestore" }, lifecycle: { preUpgrade: hook, postUpgrade: hook } });
    expect(started.status).toBe(201);
    const done = await waitFor(async () => {
      const s = await api("GET", `/admin/teams/admin/updateops/${name}`);
      return s.body.phase === "Completed" || s.body.phase === "Failed" ? s.body : undefined;
    }, 90_000);
    expect(done, JSON.stringify(done)).toMatchObject({ phase: "Completed", updatedReplicas: 1 });
    const spans = await waitFor(() => {
      const all = collector.spans().filter((s) => s.traceId === started.requestId);
      const names = ["UpdateOpsDO.preUpgrade", "UpdateOpsDO.postUpgrade", "UpdateOpsDO.checkpoint", "driver.snapshotFs", "SandboxGroupDO.upgradeBatch", "runtime.register"];
      // Each hook's command too, down to the runtime (the agent exports on its own clock).
      const hooksRan = ["UpdateOpsDO.preUpgrade", "UpdateOpsDO.postUpgrade"].every((h) => {
        const hook = all.find((s) => s.name === h);
        const ingress = hook && all.find((s) => s.name === "ingress" && s.parentSpanId === hook.spanId);
        return ingress && all.some((s) => s.parentSpanId === ingress.spanId);
      });
      return hooksRan && names.every((n) => all.some((s) => s.name === n)) ? all : undefined;
    }, 30_000);
    const byId = new Map(spans.map((s) => [s.spanId, s]));
    const parentOf = (s: ReceivedSpan) => byId.get(s.parentSpanId);
    const polls = new Set(spans.filter((s) => s.name === "UpdateOpsDO.poll").map((s) => s.spanId));
    // The hooks ran in the sandbox, each a span of the run's step that started it, with its verdict.
    for (const h of ["UpdateOpsDO.preUpgrade", "UpdateOpsDO.postUpgrade"]) {
      const span = spans.find((s) => s.name === h)!;
      expect(span, h).toMatchObject({ service: "sandbox-edge", attributes: { "sandbox.id": id, "hook.reason": "Succeeded", "hook.proceed": true } });
      expect(polls.has(span.parentSpanId), h).toBe(true);
    }
    // The checkpoint: run step → snapshot call → intent → the agent's reconcile → the driver's copy.
    const checkpoint = spans.find((s) => s.name === "UpdateOpsDO.checkpoint")!;
    expect(checkpoint.attributes["sandbox.id"]).toBe(id);
    const copy = spans.find((s) => s.name === "driver.snapshotFs")!;
    const copyReconcile = parentOf(copy)!;
    expect(copyReconcile).toMatchObject({ name: "reconcile", service: "sandbox-agent" });
    expect(parentOf(parentOf(copyReconcile)!)).toMatchObject({ name: "SandboxGroupDO.snapshot", parentSpanId: checkpoint.spanId });
    // The recreate: run step → the group's upgrade call → the upgrade's intent → reconcile →
    // driver.ensure (the new revision) and the runtime's registration of the new sandbox.
    const batch = spans.find((s) => s.name === "SandboxGroupDO.upgradeBatch" && spans.some((e) => e.name === "ClusterDO.enqueue" && e.parentSpanId === s.spanId))!;
    expect(batch, spans.map((s) => s.name).join()).toBeDefined();
    expect(polls.has(batch.parentSpanId)).toBe(true);
    const enqueue = spans.find((s) => s.name === "ClusterDO.enqueue" && s.parentSpanId === batch.spanId)!;
    expect(enqueue.attributes["sandbox.id"]).toBe(id);
    // One pass or more (a pass requeues while the new sandbox starts), each a child of the intent's span.
    const passes = spans.filter((s) => s.name === "reconcile" && s.parentSpanId === enqueue.spanId);
    expect(passes.length).toBeGreaterThan(0);
    for (const p of passes) expect(p).toMatchObject({ service: "sandbox-agent", attributes: { "sandbox.id": id, "sandbox.desired": "running" } });
    // Each hook's command reached the runtime through the ingress in the hook's trace.
    for (const h of ["UpdateOpsDO.preUpgrade", "UpdateOpsDO.postUpgrade"]) {
      const hook = spans.find((s) => s.name === h)!;
      const ingress = spans.find((s) => s.name === "ingress" && s.parentSpanId === hook.spanId);
      expect(ingress, h).toMatchObject({ service: "sandbox-agent", attributes: { "url.path": "/process.Process/Start" } });
      expect(spans.find((s) => s.name === "process.Process/Start" && s.parentSpanId === ingress!.spanId), h).toMatchObject({ scope: "agent-runtime" });
    }
    const inPass = (n: string) => spans.find((s) => s.name === n && passes.some((p) => p.spanId === s.parentSpanId));
    expect(inPass("driver.ensure")).toBeDefined();
    expect(inPass("runtime.register")).toMatchObject({ scope: "agent-runtime" });
    await api("DELETE", `/admin/teams/admin/updateops/${name}`);
    await api("DELETE", `/sandboxes/${id}`);
    await api("DELETE", `/admin/teams/admin/templates/${name}`);
  });

  it("the pool's own creates (its stock) are a trace of their own, down to the agent's reconcile and driver", async () => {
    // The create in the first case claimed the warm member; the pool made another.
    const spans = await waitFor(() => {
      const all = collector.spans();
      const batch = all.find((s) => s.name === "PoolDO.enqueue" && Number(s.attributes["pool.creates"]) > 0 && all.some((r) => r.name === "reconcile" && r.parentSpanId === s.spanId));
      return batch ? all.filter((s) => s.traceId === batch.traceId) : undefined;
    }, 30_000);
    const batch = spans.find((s) => s.name === "PoolDO.enqueue")!;
    expect(batch).toMatchObject({ service: "sandbox-edge", parentSpanId: "" });
    const reconcile = spans.find((s) => s.name === "reconcile" && s.parentSpanId === batch.spanId)!;
    expect(reconcile).toMatchObject({ service: "sandbox-agent" });
    expect(spans.find((s) => s.name === "driver.ensure" && s.parentSpanId === reconcile.spanId)).toBeDefined();
  });

  // After the pool case: the autoscaler's creates are children of its evaluation, not roots.
  it("a PoolAutoscaler's evaluation is a span with its decision, and the creates of its scale are its children down to the agent", async () => {
    const name = `trace-as-${Date.now().toString(36)}`;
    expect((await api("PUT", `/admin/teams/admin/templates/${name}`, { spec: { replicas: 0, memoryMB: 256 } })).status).toBeLessThan(300);
    const spec = { minReplicas: 0, maxReplicas: 2, cronPolicies: [{ name: "always", schedule: "* * * * *", targetReplicas: 1 }], sampling: { intervalSeconds: 1, windowSeconds: 1 } };
    const set = await api("PUT", `/admin/teams/admin/templates/${name}/autoscaler`, spec);
    expect(set.status).toBe(200);
    // Set through the API: evaluated at once, in the request's trace.
    // The edge exports at most once a second and the agent every 0.5 s: wait for both sides' spans.
    const names = ["PoolDO.setAutoscaler", "PoolAutoscaler.evaluate", "PoolDO.enqueue", "reconcile", "driver.ensure"];
    const spans = await waitFor(() => {
      const all = collector.spans().filter((s) => s.traceId === set.requestId);
      return all.some((s) => s.name.startsWith("PUT")) && names.every((n) => all.some((s) => s.name === n)) ? all : undefined;
    }, 30_000);
    const setCall = spans.find((s) => s.name === "PoolDO.setAutoscaler")!;
    expect(setCall.parentSpanId).toBe(spans.find((s) => s.name.startsWith("PUT"))!.spanId);
    const evaluation = spans.find((s) => s.name === "PoolAutoscaler.evaluate")!;
    expect(evaluation).toMatchObject({
      service: "sandbox-edge",
      parentSpanId: setCall.spanId,
      attributes: { "pool.name": expect.stringMatching(new RegExp(`/${name}$`)), "autoscaler.decision": "scale_up", "autoscaler.reason": "CronPolicy" },
    });
    // OTLP JSON carries integers as strings.
    expect([Number(evaluation.attributes["autoscaler.current_replicas"]), Number(evaluation.attributes["autoscaler.desired_replicas"])]).toEqual([0, 1]);
    const enqueue = spans.find((s) => s.name === "PoolDO.enqueue")!;
    expect(enqueue.parentSpanId).toBe(evaluation.spanId);
    expect(Number(enqueue.attributes["pool.creates"])).toBe(1);
    const reconcile = spans.find((s) => s.name === "reconcile" && s.parentSpanId === enqueue.spanId)!;
    expect(reconcile).toMatchObject({ service: "sandbox-agent" });
    expect(spans.find((s) => s.name === "driver.ensure" && s.parentSpanId === reconcile.spanId)).toBeDefined();
    // Its next evaluations (the pool's alarm) are traces of their own; at the size, nothing to do.
    const later = await waitFor(() => collector.spans().find((s) => s.name === "PoolAutoscaler.evaluate" && s.attributes["pool.name"] === evaluation.attributes["pool.name"] && s.parentSpanId === "" && Number(s.attributes["autoscaler.current_replicas"]) === 1), 30_000);
    expect(later.attributes).toMatchObject({ "autoscaler.decision": "none", "autoscaler.reason": "CronPolicy" });
    expect(Number(later.attributes["autoscaler.desired_replicas"])).toBe(1);
    expect((await api("DELETE", `/admin/teams/admin/templates/${name}/autoscaler`)).status).toBe(204);
    await api("DELETE", `/admin/teams/admin/templates/${name}`);
  });

  it("a command run through the SDK is one trace from the edge's gateway through the agent's ingress to the runtime; the gateway echoes the trace id in X-Request-Id", async () => {
    const sbx = await Sandbox.create({ apiKey: sys.apiKey, apiUrl: sys.apiUrl, sandboxUrl: sys.apiUrl, requestTimeoutMs: 30_000 });
    try {
      const run = await sbx.commands.run("echo traced");
      expect(run.stdout).toBe("traced\n");
      const chain = (path: string, rpc: string) =>
        waitFor(() => {
          const gateway = collector.spans().find((s) => s.name === "gateway" && s.attributes["sandbox.id"] === sbx.sandboxId && s.attributes["url.path"] === path);
          const all = gateway ? collector.spans().filter((s) => s.traceId === gateway.traceId) : [];
          return all.some((s) => s.name === rpc) ? { gateway: gateway!, all } : undefined;
        }, 30_000);
      const { gateway, all } = await chain("/process.Process/Start", "process.Process/Start");
      expect(gateway).toMatchObject({ service: "sandbox-edge", parentSpanId: "", attributes: { "http.request.method": "POST" } });
      expect(Number(gateway.attributes["http.response.status_code"])).toBe(200);
      const ingress = all.find((s) => s.name === "ingress" && s.parentSpanId === gateway.spanId);
      expect(ingress).toMatchObject({ service: "sandbox-agent", attributes: { "sandbox.id": sbx.sandboxId, "url.path": "/process.Process/Start" } });
      expect(all.find((s) => s.name === "process.Process/Start")).toMatchObject({ service: "sandbox-agent", scope: "agent-runtime", parentSpanId: ingress!.spanId, attributes: { "sandbox.id": sbx.sandboxId } });

      // A caller's own traceparent: the gateway's span joins it, and its id is the answer's X-Request-Id.
      const traceId = [...crypto.getRandomValues(new Uint8Array(16))].map((b) => b.toString(16).padStart(2, "0")).join("");
      const health = await fetch(`${sys.apiUrl}/health`, { headers: { "e2b-sandbox-id": sbx.sandboxId, "e2b-sandbox-port": "49983", traceparent: `00-${traceId}-00f067aa0ba902b7-01` } });
      expect(health.status).toBe(204);
      expect(health.headers.get("x-request-id")).toBe(traceId);
      const spans = await spansNamed(traceId, ["gateway", "ingress", "GET /health"]);
      const gw = spans.find((s) => s.name === "gateway")!;
      expect(gw.parentSpanId).toBe("00f067aa0ba902b7");
      const ing = spans.find((s) => s.name === "ingress")!;
      expect(ing.parentSpanId).toBe(gw.spanId);
      expect(spans.find((s) => s.name === "GET /health")?.parentSpanId).toBe(ing.spanId);
      // Without one, a fresh id; an error the gateway answers itself carries one too.
      const unknown = await fetch(`${sys.apiUrl}/health`, { headers: { "e2b-sandbox-id": "nosuchsandbox0000000", "e2b-sandbox-port": "49983" } });
      expect(unknown.status).toBe(502);
      expect(unknown.headers.get("x-request-id")).toMatch(/^[0-9a-f]{32}$/);
    } finally {
      await sbx.kill();
    }
  });

  it("every request carries its trace id", async () => {
    const listed = await api("GET", "/v2/sandboxes");
    expect(listed.requestId).toMatch(/^[0-9a-f]{32}$/);
  });

  // Last: it restarts the agent.
  it("a kill the agent received but never acked is redelivered after its restart, still in the kill's trace", async () => {
    const created = await api("POST", "/v2/sandboxes", { templateID: "base" });
    expect(created.status).toBe(201);
    const id = created.body.sandboxID as string;
    // The agent is frozen: the intent frame reaches its socket and is never read or acked.
    process.kill(sys.parts.agent.current!.pid, "SIGSTOP");
    let killed: Awaited<ReturnType<typeof api>>;
    try {
      killed = await api("DELETE", `/sandboxes/${id}`);
      expect(killed.status).toBe(204);
    } finally {
      await sys.stopAgent("SIGKILL");
    }
    await sys.startAgent();
    const spans = await spansNamed(killed.requestId, ["DELETE /sandboxes/:id", "SandboxGroupDO.kill", "ClusterDO.enqueue", "reconcile", "driver.destroy"]);
    const enqueue = spans.find((s) => s.name === "ClusterDO.enqueue")!;
    const reconcile = spans.find((s) => s.name === "reconcile" && s.parentSpanId === enqueue.spanId)!;
    expect(reconcile).toMatchObject({ service: "sandbox-agent", attributes: { "sandbox.id": id } });
    expect(spans.find((s) => s.name === "driver.destroy")?.parentSpanId).toBe(reconcile.spanId);
  });
});
