// A PoolAutoscaler on the local driver, through the admin API and the real E2B SDK: a claim burst
// drains the warm pool of real sandboxes and the autoscaler grows it (its status says why); once
// the burst is over and its scale-down window has passed, it shrinks the pool back. Short windows
// set by the test; it waits for states, never for times. The scripted-agent version (each member
// made ready when the test says) is test/workerd/pool-autoscaler.test.ts.
import { Sandbox } from "e2b";
import { afterAll, describe, expect, it } from "vitest";
import { waitFor } from "../support/wait-for.ts";
import { admin, e2b, poolSettled, uniqueTag, type PoolView } from "./sdk.ts";

const template = `pa${uniqueTag()}`;
const path = `/admin/teams/admin/templates/${template}`;
const made: Sandbox[] = [];

afterAll(async () => {
  await Promise.all(made.map((s) => s.kill().catch(() => false)));
  await admin(`${path}/autoscaler`, { method: "DELETE" }).catch(() => undefined);
  await admin(path, { method: "DELETE" }).catch(() => undefined);
});

interface Autoscaler {
  desiredReplicas: number;
  currentReplicas: number;
  lastDecision: { reason: string; currentReplicas: number; desiredReplicas: number; message: string } | null;
  events: { reason: string; message: string }[];
  conditions: { type: string; status: string }[];
}
const pool = async () => (await admin(path)).pool as PoolView;
const autoscaler = async () => (await admin(`${path}/autoscaler`)) as Autoscaler;
const rescales = (a: Autoscaler) => a.events.filter((e) => e.reason === "SuccessfulRescale").map((e) => e.message);

describe("PoolAutoscaler on the local driver", { timeout: 300_000 }, () => {
  it("a claim burst scales the warm pool up with its reason in status; after the burst and the scale-down window it scales back down", async () => {
    await admin(path, { method: "PUT", body: { spec: { replicas: 2, memoryMB: 256 } } });
    await waitFor(async () => poolSettled(await pool()) && (await pool()).replicas === 2, { what: "2 warm members", timeoutMs: 120_000, intervalMs: 200 });
    const set = await admin(`${path}/autoscaler`, {
      method: "PUT",
      body: {
        minReplicas: 2,
        maxReplicas: 6,
        capacityPolicy: { targetAvailable: 2, tolerance: 0, scaleUp: { stabilizationWindowSeconds: 1 }, scaleDown: { stabilizationWindowSeconds: 3 } },
        sampling: { intervalSeconds: 1, windowSeconds: 2 },
      },
    });
    expect(set).toMatchObject({ configured: true, currentReplicas: 2, desiredReplicas: 2 });

    // The burst: claims, two at once, until the autoscaler answers the drained stock (real
    // members refill quickly, so the test keeps claiming rather than guess how fast).
    let up: Autoscaler | undefined;
    for (let round = 0; round < 4 && !up; round++) {
      made.push(...(await Promise.all([0, 1].map(() => Sandbox.create(template, { ...e2b(), timeoutMs: 600_000 })))));
      up = await waitFor(async () => { const a = await autoscaler(); return a.desiredReplicas > 2 ? a : undefined; }, { what: "a scale-up", timeoutMs: 5_000, intervalMs: 100 }).catch(() => undefined);
    }
    expect(up, "the autoscaler scaled up during the burst").toBeDefined();
    expect(up!.lastDecision).toMatchObject({ reason: "BelowTarget", currentReplicas: 2 });
    expect(up!.lastDecision!.desiredReplicas).toBeGreaterThan(2);
    expect(rescales(up!)[0]).toContain(`New size: ${up!.lastDecision!.desiredReplicas}`);
    const grown = up!.lastDecision!.desiredReplicas;
    await waitFor(async () => (await pool()).replicas === grown || undefined, { what: `the pool at ${grown}`, timeoutMs: 30_000, intervalMs: 100 });

    // The burst is over: the grown pool fills up, above the target band; after the scale-down
    // window the autoscaler shrinks it back to its floor, and the pool follows.
    const down = await waitFor(
      async () => {
        const a = await autoscaler();
        return a.desiredReplicas === 2 && a.lastDecision?.reason === "AboveTarget" ? a : undefined;
      },
      { what: "the scale-down", timeoutMs: 120_000, intervalMs: 200 },
    );
    expect(rescales(down).at(-1)).toContain("New size: 2");
    expect(rescales(down).length).toBeGreaterThanOrEqual(2);
    expect(down.conditions).toContainEqual(expect.objectContaining({ type: "ScalingActive", status: "True" }));
    await waitFor(async () => { const p = await pool(); return p.replicas === 2 && poolSettled(p); }, { what: "the pool back at 2", timeoutMs: 60_000, intervalMs: 200 });
    // The claimed sandboxes were the burst's, not the pool's: still there, still running.
    for (const s of made) expect((await Sandbox.getInfo(s.sandboxId, e2b())).state).toBe("running");
  });
});
