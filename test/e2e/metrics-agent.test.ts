// The agent's Prometheus endpoint, scraped as Prometheus would and parsed by an independent text
// parser: the numbers follow what a user did through the real e2b SDK (sandboxes created and
// killed, a background command, an egress request the rules deny and one they allow), and no
// series names a sandbox.
import { ALL_TRAFFIC, Sandbox } from "e2b";
import { afterAll, describe, expect, it } from "vitest";
import { inject } from "vitest";
import { startOutside } from "../support/outside-net.ts";
import { scrape, value } from "../support/prometheus-text.ts";
import { e2b } from "./sdk.ts";

const url = () => inject("e2b").metricsUrl;
const created: Sandbox[] = [];

afterAll(async () => {
  await Promise.all(created.map((s) => s.kill().catch(() => false)));
});

const running = async () => value(await scrape(url()), "sandbox_agent_sandboxes", { state: "Running", owner: "sandbox" });

describe("agent /metrics", () => {
  it("counts the sandboxes users create and kill, by state, and no series carries a sandbox id", async () => {
    const before = await running();
    const sbxs = await Promise.all([0, 1, 2].map(() => Sandbox.create(e2b())));
    created.push(...sbxs);
    const m = await scrape(url());
    expect(m.types.get("sandbox_agent_sandboxes")).toBe("GAUGE");
    expect(value(m, "sandbox_agent_sandboxes", { state: "Running", owner: "sandbox" })).toBe(before + 3);
    // The reconciler's queue is measured under its name.
    expect(m.types.get("workqueue_depth")).toBe("GAUGE");
    expect(m.samples.some((s) => s.name === "workqueue_depth" && s.labels.name === "sandbox")).toBe(true);
    expect(m.types.get("controller_runtime_reconcile_time_seconds")).toBe("HISTOGRAM");
    expect(value(m, "controller_runtime_reconcile_time_seconds_count", { controller: "sandbox" })).toBeGreaterThan(0);
    expect(value(m, "controller_runtime_reconcile_time_seconds_bucket", { controller: "sandbox", le: "+Inf" })).toBe(value(m, "controller_runtime_reconcile_time_seconds_count", { controller: "sandbox" }));
    const ids = new Set(sbxs.map((s) => s.sandboxId));
    for (const s of m.samples) for (const v of Object.values(s.labels)) expect(ids.has(v)).toBe(false);

    // A kill answers once the edge has it; the agent tears the sandbox down after that.
    const destroyed = value(m, "sandbox_agent_driver_step_seconds_count", { step: "destroy", result: "ok" });
    await Promise.all(sbxs.map((s) => s.kill()));
    await expect.poll(() => running(), { timeout: 15_000 }).toBe(before);
    // Each driver step of a reconcile pass is timed under its name; the teardowns are three destroys.
    const after = await scrape(url());
    expect(after.types.get("sandbox_agent_driver_step_seconds")).toBe("HISTOGRAM");
    expect(after.types.get("sandbox_agent_driver_steps_in_flight")).toBe("GAUGE");
    expect(value(after, "sandbox_agent_driver_step_seconds_count", { step: "destroy", result: "ok" })).toBe(destroyed + 3);
    expect(value(after, "sandbox_agent_driver_step_seconds_count", { step: "ensure", result: "ok" })).toBeGreaterThanOrEqual(3);
    expect(value(after, "sandbox_agent_driver_step_seconds_count", { step: "register", result: "ok" })).toBeGreaterThanOrEqual(3);
  });

  it("shows the pool's stock: Running warm members as the edge's pools count them", async () => {
    const { apiUrl, apiKey } = inject("e2b");
    // Every pool of the team, not only base's: other files leave pools behind (the code
    // interpreter's warm member), and the agent's gauge has no template label.
    const pool = async () => {
      const res = await fetch(`${apiUrl}/admin/teams/admin/templates`, { headers: { "x-api-key": apiKey } });
      const templates = (await res.json()) as { pool: { available?: number } | null }[];
      return templates.reduce((n, t) => n + (t.pool?.available ?? 0), 0);
    };
    // Both sides settle after the claims of the other cases; the edge counts ready members.
    await expect
      .poll(async () => {
        const [stock, available] = await Promise.all([scrape(url()).then((m) => value(m, "sandbox_agent_sandboxes", { state: "Running", owner: "pool" })), pool()]);
        return stock === available && stock > 0;
      }, { timeout: 60_000, interval: 500 })
      .toBe(true);
  });

  it("counts the runtime's live processes", async () => {
    const sbx = await Sandbox.create(e2b());
    created.push(sbx);
    const before = value(await scrape(url()), "sandbox_agent_runtime_processes");
    const h = await sbx.commands.run("sleep 300", { background: true });
    expect(value(await scrape(url()), "sandbox_agent_runtime_processes")).toBe(before + 1);
    await h.kill();
    await h.wait().catch(() => undefined);
    expect(value(await scrape(url()), "sandbox_agent_runtime_processes")).toBe(before);
  });

  it("counts an egress request the rules deny", async () => {
    const sbx = await Sandbox.create({ ...e2b(), network: { denyOut: [ALL_TRAFFIC], allowOut: ["localhost"] } });
    created.push(sbx);
    const denied = value(await scrape(url()), "sandbox_egress_decisions_total", { decision: "deny" });
    // Denied by name before any lookup: nothing leaves this machine.
    const r = await sbx.commands.run("curl -s -m 5 http://blocked.example.com/").catch((err: { stdout?: string }) => err);
    expect(r.stdout).toMatch(/egress denied/);
    expect(value(await scrape(url()), "sandbox_egress_decisions_total", { decision: "deny" })).toBe(denied + 1);
  });

  it("counts an egress connection the rules allow, once", async () => {
    // "The internet": a namespace this test makes, which the rules allow.
    const outside = await startOutside();
    try {
      const sbx = await Sandbox.create({ ...e2b(), network: { denyOut: [ALL_TRAFFIC], allowOut: [outside.ip] } });
      created.push(sbx);
      const before = await scrape(url());
      const r = await sbx.commands.run(`curl -s -m 5 http://${outside.ip}/`);
      expect(r.stdout).toMatch(/^outside saw /);
      const after = await scrape(url());
      expect(value(after, "sandbox_egress_decisions_total", { decision: "allow" }) - value(before, "sandbox_egress_decisions_total", { decision: "allow" })).toBe(1);
      expect(value(after, "sandbox_egress_decisions_total", { decision: "deny" })).toBe(value(before, "sandbox_egress_decisions_total", { decision: "deny" }));
    } finally {
      outside.stop();
    }
  });

  it("answers 404 off /metrics", async () => {
    const res = await fetch(new URL("/other", url()));
    expect(res.status).toBe(404);
  });
});
