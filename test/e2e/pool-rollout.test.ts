// A SandboxSet-style rolling update on the local driver, through the admin API and the real E2B
// SDK: a template with a warm pool gets a new env (a new revision); its warm members, real
// sandboxes, are replaced at most maxUnavailable at a time (every pool view read while it rolls
// says so), the view's updateRevision/currentRevision/updatedReplicas follow it to the end, a new
// claim then gets the new env, and a sandbox claimed before is left alone (its env, its process).
// The scripted-agent version of this (each step forced) is test/workerd/pool-rollout.test.ts; the
// kubectl one test/kube/rollout.test.ts.
import { Sandbox } from "e2b";
import { afterAll, describe, expect, it } from "vitest";
import { waitFor } from "../support/wait-for.ts";
import { admin, e2b, poolSettled, uniqueTag, type PoolView } from "./sdk.ts";

const template = `roll${uniqueTag()}`;
const path = `/admin/teams/admin/templates/${template}`;
const made: Sandbox[] = [];

afterAll(async () => {
  await Promise.all(made.map((s) => s.kill().catch(() => false)));
  await admin(path, { method: "DELETE" }).catch(() => undefined);
});

const put = (roll: string) => admin(path, { method: "PUT", body: { spec: { replicas: 3, memoryMB: 256, env: { ROLL: roll }, updateStrategy: { maxUnavailable: 1 } } } });
const pool = async () => (await admin(path)).pool as PoolView;
const settledPool = () => waitFor(async () => { const p = await pool(); return poolSettled(p) ? p : undefined; }, { what: `${template}'s pool settled`, timeoutMs: 120_000, intervalMs: 200 });

async function claim(): Promise<Sandbox> {
  const s = await Sandbox.create(template, { ...e2b(), timeoutMs: 600_000 });
  made.push(s);
  return s;
}
const roll = async (s: Sandbox) => (await s.commands.run("echo $ROLL")).stdout.trim();

describe("rolling update of a warm pool on the local driver", { timeout: 300_000 }, () => {
  it("a new env replaces the warm members at most maxUnavailable at a time, the pool view follows the revisions, a claimed sandbox is left alone", async () => {
    const rev1: string = (await put("one")).revision;
    expect(await settledPool()).toMatchObject({ replicas: 3, updateRevision: rev1, currentRevision: rev1, updatedReplicas: 3, maxUnavailable: 1 });

    const before = await claim();
    expect(await roll(before)).toBe("one");
    const sleeper = await before.commands.run("sleep 3600", { background: true });
    await settledPool(); // the pool made up for the claim

    const changed = await put("two");
    const rev2: string = changed.revision;
    expect(rev2).not.toBe(rev1);
    expect(changed.pool).toMatchObject({ updateRevision: rev2, currentRevision: rev1, maxUnavailable: 1 });
    // Read the pool while it rolls: never more than maxUnavailable (1) of the 3 unavailable, so
    // never more than one replacement creating; it ends with every member of rev2.
    const seen: PoolView[] = [changed.pool];
    const done = await waitFor(
      async () => {
        const p = await pool();
        seen.push(p);
        return poolSettled(p) ? p : undefined;
      },
      { what: `${template}'s pool rolled to ${rev2}`, timeoutMs: 240_000, intervalMs: 100 },
    );
    expect(done).toMatchObject({ replicas: 3, available: 3, creating: 0, updateRevision: rev2, currentRevision: rev2, updatedReplicas: 3, updatedAvailableReplicas: 3 });
    for (const p of seen) {
      expect(p.replicas - p.available, JSON.stringify(p)).toBeLessThanOrEqual(1);
      expect(p.creating, JSON.stringify(p)).toBeLessThanOrEqual(1);
      expect(p.updateRevision).toBe(rev2);
    }
    // It was a rollout, one member at a time: views with old members left, some replaced.
    const partway = seen.filter((p) => p.currentRevision === rev1 && p.updatedReplicas > 0 && p.updatedReplicas < 3);
    expect(partway.length, JSON.stringify(seen)).toBeGreaterThan(0);

    // A claim now gets the new env; the sandbox claimed before still has its own, and its process.
    expect(await roll(await claim())).toBe("two");
    expect(await roll(before)).toBe("one");
    expect((await before.commands.run(`kill -0 ${sleeper.pid} && echo alive`)).stdout).toBe("alive\n");
  });
});
