// The sandbox machine's `upgrade` event (an update ops run's Recreate) and its outcome as the run
// reads it: idempotent by (revision, attempt), a paused sandbox stays paused, a failed upgrade is
// retried by the next attempt.
import { describe, expect, it } from "vitest";
import { transition } from "../../../../durable-objects/sandbox/machine.ts";
import type { SandboxEvent } from "../../../../durable-objects/sandbox/events.ts";
import { MAX_SANDBOX_EVENTS, type SandboxState } from "../../../../durable-objects/sandbox/state.ts";
import { restoreNeeds, restoresSettled, upgradeOutcome } from "../../../../durable-objects/sandbox/upgrade.ts";
import type { Observation, TemplateSpec } from "../../../../schema/protocol/index.ts";

const T0 = 1_800_000_000_000;
const r1: TemplateSpec = { id: "base", revision: "r1", image: "base", user: "user", workdir: "/home/user", resources: { cpuCount: 1, memoryMB: 512 } };
const r2: TemplateSpec = { ...r1, revision: "r2" };
const r3: TemplateSpec = { ...r1, revision: "r3" };

function running(): SandboxState {
  const spec = {
    id: "abc", teamId: "team", keyId: "key", templateId: "base", cluster: "local", template: r1, envdVersion: "0.6.4", cpuCount: 1, memoryMB: 512, diskSizeMB: 1024,
    envVars: {}, metadata: {}, labels: {}, allowInternetAccess: null, network: null, volumeMounts: [],
    lifecycle: { onTimeout: "kill" as const, autoResume: false, timeoutPauseStrategy: "Freeze" as const }, pauseStrategy: "Freeze" as const,
    pausedRetentionMs: null, neverTimeout: false, envdAccessToken: "tok", trafficAccessToken: null,
  };
  const s = transition(null, { type: "create", spec, timeoutS: 300, generation: 2, endpoint: null }, T0).state!;
  return transition(s, { type: "ack", generation: 2, result: "applied" }, T0).state!;
}

const up = (template: TemplateSpec, attempt = 1): SandboxEvent => ({ type: "upgrade", template, attempt });
const observe = (phase: Observation["phase"], generation: number, ready = phase === "Running"): SandboxEvent => ({
  type: "observe",
  obs: { sandboxId: "abc" as Observation["sandboxId"], generation, phase, ready, endpoint: null, observedAt: T0 },
});

describe("sandbox upgrade", () => {
  it("two runs with different targets: the first one's upgrade under way holds the sandbox, the other's is not applied and is answered held, so neither re-sends over the other; once done, another run may upgrade it", () => {
    const byA = (template: TemplateSpec, attempt = 1): SandboxEvent => ({ type: "upgrade", template, attempt, by: "a" });
    const byB = (template: TemplateSpec, attempt = 1): SandboxEvent => ({ type: "upgrade", template, attempt, by: "b" });
    const a = transition(running(), byA(r2), T0 + 1).state!;
    const b = transition(a, byB(r3), T0 + 2);
    expect(b.effects).toEqual([]);
    expect(b.state!.spec.template.revision).toBe("r2");
    expect(upgradeOutcome(b.state, "r3", 1, "b")).toEqual({ status: "held", message: expect.stringContaining('SandboxUpdateOps "a" holds it (its upgrade to revision r2 is under way)') });
    // Run a asking again (each poll re-sends) sends nothing new and is still its own.
    expect(transition(b.state, byA(r2), T0 + 3).effects).toEqual([]);
    expect(upgradeOutcome(b.state, "r2", 1, "a").status).toBe("updating");
    // Failed, it is no longer held: run a may be failed for good or deleted, and nothing would
    // release it; run b's upgrade goes ahead (review N4).
    const failed = transition(b.state, observe("Failed", 3, false), T0 + 4).state!;
    expect(upgradeOutcome(failed, "r3", 1, "b").status).not.toBe("held");
    expect(transition(failed, byB(r3), T0 + 5).state!.spec.template.revision).toBe("r3");
    // Done: run b's upgrade goes ahead.
    const done = transition(b.state, observe("Running", 3), T0 + 4).state!;
    expect(upgradeOutcome(done, "r2", 1, "a").status).toBe("succeeded");
    const later = transition(done, byB(r3), T0 + 5);
    expect(later.state!.spec.template.revision).toBe("r3");
    expect(upgradeOutcome(later.state, "r3", 1, "b").status).toBe("updating");
  });

  it("sends the new template once, and is done when the agent runs it ready", () => {
    const s = running();
    const t = transition(s, up(r2), T0 + 1);
    expect(t.effects.map((e) => e.kind)).toEqual(["intent"]);
    const intent = t.effects[0]!.kind === "intent" ? t.effects[0]!.intent : null;
    expect(intent).toMatchObject({ generation: 3, desired: { state: "running" }, template: { revision: "r2" } });
    expect(upgradeOutcome(t.state, "r2", 1).status).toBe("updating");
    // Asked again (an ops run that lost the answer): nothing new is sent.
    const again = transition(t.state, up(r2), T0 + 2);
    expect(again.effects).toEqual([]);
    expect(again.state).toBe(t.state);
    const notReady = transition(t.state, observe("Running", 3, false), T0 + 3).state!;
    expect(upgradeOutcome(notReady, "r2", 1).status).toBe("updating");
    const done = transition(notReady, observe("Running", 3), T0 + 4).state!;
    expect(upgradeOutcome(done, "r2", 1).status).toBe("succeeded");
    expect(done.conditions.find((c) => c.type === "Upgrading")).toMatchObject({ status: "True", reason: "Succeeded" });
  });

  it("a paused sandbox is upgraded paused and stays paused", () => {
    const paused = transition(transition(running(), { type: "pause" }, T0).state, { type: "ack", generation: 3, result: "applied" }, T0).state!;
    expect(paused.phase).toBe("Paused");
    const t = transition(paused, up(r2), T0 + 1);
    expect(t.effects[0]).toMatchObject({ kind: "intent", intent: { desired: { state: "paused" }, template: { revision: "r2" } } });
    const done = transition(t.state, { type: "ack", generation: 4, result: "applied" }, T0 + 2).state!;
    expect(done.phase).toBe("Paused");
    expect(upgradeOutcome(done, "r2", 1).status).toBe("succeeded");
  });

  it("CheckpointRestore of a paused sandbox: succeeded paused with the restore pending until a report without the pending reason", () => {
    const paused = transition(transition(running(), { type: "pause" }, T0).state, { type: "ack", generation: 3, result: "applied" }, T0).state!;
    const t = transition(paused, { ...up(r2), restoreFs: "snap-1" } as SandboxEvent, T0 + 1).state!;
    const pending: SandboxEvent = { type: "observe", obs: { sandboxId: "abc" as Observation["sandboxId"], generation: 4, phase: "Paused", ready: false, endpoint: null, observedAt: T0, reason: "RestorePending" } };
    const reported = transition(t, pending, T0 + 2).state!;
    const done = transition(reported, { type: "ack", generation: 4, result: "applied" }, T0 + 3).state!;
    expect(done.phase).toBe("Paused");
    expect(upgradeOutcome(done, "r2", 1)).toEqual({ status: "succeeded", restorePending: true, restoreFs: "snap-1" });
    // Acked before its report (the agent sends acks first): not done until the report says.
    const acked = transition(t, { type: "ack", generation: 4, result: "applied" }, T0 + 2).state!;
    expect(upgradeOutcome(acked, "r2", 1)).toEqual({ status: "updating" });
    // A driver that restored while paused reports Paused without the reason: nothing pending.
    expect(upgradeOutcome(transition(acked, observe("Paused", 4, false), T0 + 4).state, "r2", 1)).toEqual({ status: "succeeded" });
    // The Kubernetes driver: the resume pod names the checkpoint; running ready, it is restored.
    const resuming = transition(done, { type: "connect", timeoutS: 300 } as SandboxEvent, T0 + 5).state!;
    expect(upgradeOutcome(resuming, "r2", 1).restorePending).toBe(true);
    expect(upgradeOutcome(transition(resuming, observe("Running", resuming.generation), T0 + 6).state, "r2", 1)).toEqual({ status: "succeeded" });
  });

  it("a failed upgrade is reported, and retried by the next attempt only", () => {
    const t = transition(running(), up(r2), T0 + 1).state!;
    const failed = transition(t, observe("Failed", 3, false), T0 + 2).state!;
    expect(upgradeOutcome(failed, "r2", 1)).toMatchObject({ status: "failed" });
    expect(transition(failed, up(r2, 1), T0 + 3).effects).toEqual([]);
    const retry = transition(failed, up(r2, 2), T0 + 3);
    expect(retry.state!.phase).toBe("Pending");
    expect(retry.effects.map((e) => e.kind)).toEqual(["intent", "index"]);
    expect(upgradeOutcome(retry.state, "r2", 2).status).toBe("updating");
  });

  it("waits while the sandbox is pausing; a gone one is gone", () => {
    const pausing = transition(running(), { type: "pause" }, T0).state!;
    expect(transition(pausing, up(r2), T0 + 1).result).toMatchObject({ ok: false });
    expect(upgradeOutcome(pausing, "r2", 1).status).toBe("waiting");
    expect(upgradeOutcome(null, "r2", 1).status).toBe("gone");
  });
  it("a later upgrade of a paused sandbox whose restore is pending carries the restore forward: the snapshot stays needed, its intent still names it, and it is freed only after the resume restores it", () => {
    const paused = transition(transition(running(), { type: "pause" }, T0).state, { type: "ack", generation: 3, result: "applied" }, T0).state!;
    const a = transition(paused, { ...up(r2), restoreFs: "snap-1", holder: "ck" } as SandboxEvent, T0 + 1).state!;
    const pendingAt = (generation: number): SandboxEvent => ({ type: "observe", obs: { sandboxId: "abc" as Observation["sandboxId"], generation, phase: "Paused", ready: false, endpoint: null, observedAt: T0, reason: "RestorePending" } });
    const kept = transition(transition(a, pendingAt(4), T0 + 2).state, { type: "ack", generation: 4, result: "applied" }, T0 + 3).state!;
    expect(restoreNeeds(kept, "snap-1")).toBe(true);
    // A Recreate run (no snapshot of its own) upgrades it again while the restore is pending.
    const b = transition(kept, up(r3), T0 + 4);
    expect(b.effects[0]).toMatchObject({ kind: "intent", intent: { desired: { state: "paused" }, template: { revision: "r3" }, restoreFs: { id: "snap-1" } } });
    expect(restoreNeeds(b.state, "snap-1")).toBe(true);
    expect(restoresSettled(kept, b.state)).toEqual([]);
    const bDone = transition(transition(b.state, pendingAt(5), T0 + 5).state, { type: "ack", generation: 5, result: "applied" }, T0 + 6).state!;
    expect(upgradeOutcome(bDone, "r3", 1)).toEqual({ status: "succeeded", restorePending: true, restoreFs: "snap-1" });
    expect(restoreNeeds(bDone, "snap-1")).toBe(true);
    // Resumed: its pod names the checkpoint, it runs ready; only now is the snapshot free, and the
    // run holding it is woken.
    const resuming = transition(bDone, { type: "connect", timeoutS: 300 } as SandboxEvent, T0 + 7).state!;
    expect(restoreNeeds(resuming, "snap-1")).toBe(true);
    const restored = transition(resuming, observe("Running", resuming.generation), T0 + 8).state!;
    expect(restoreNeeds(restored, "snap-1")).toBe(false);
    expect(restoresSettled(resuming, restored)).toEqual([{ snapshotId: "snap-1", holder: "ck" }]);
    // The agent's applied ack of the resume says as much (ClusterDO drops the observation repeating it).
    const acked = transition(resuming, { type: "ack", generation: resuming.generation, result: "applied" }, T0 + 8).state!;
    expect(restoreNeeds(acked, "snap-1")).toBe(false);
  });

  it("a later CheckpointRestore of a restore-pending sandbox replaces the pending restore; the old snapshot is needed until the new upgrade is done", () => {
    const paused = transition(transition(running(), { type: "pause" }, T0).state, { type: "ack", generation: 3, result: "applied" }, T0).state!;
    const pending: SandboxEvent = { type: "observe", obs: { sandboxId: "abc" as Observation["sandboxId"], generation: 4, phase: "Paused", ready: false, endpoint: null, observedAt: T0, reason: "RestorePending" } };
    const kept = transition(transition(transition(paused, { ...up(r2), restoreFs: "snap-1", holder: "a" } as SandboxEvent, T0 + 1).state, pending, T0 + 2).state, { type: "ack", generation: 4, result: "applied" }, T0 + 3).state!;
    const b = transition(kept, { ...up(r3), restoreFs: "snap-2", holder: "b" } as SandboxEvent, T0 + 4);
    expect(b.effects[0]).toMatchObject({ kind: "intent", intent: { restoreFs: { id: "snap-2" } } });
    expect(restoreNeeds(b.state, "snap-1")).toBe(true);
    expect(restoreNeeds(b.state, "snap-2")).toBe(true);
    const done = transition(transition(b.state, { ...pending, obs: { ...(pending as Extract<SandboxEvent, { type: "observe" }>).obs, generation: 5 } }, T0 + 5).state, { type: "ack", generation: 5, result: "applied" }, T0 + 6).state!;
    expect(restoreNeeds(done, "snap-1")).toBe(false);
    expect(restoresSettled(b.state, done)).toEqual([{ snapshotId: "snap-1", holder: "a" }]);
    expect(restoreNeeds(done, "snap-2")).toBe(true);
  });

  it("a restore already done is not carried: a later upgrade names no snapshot", () => {
    const paused = transition(transition(running(), { type: "pause" }, T0).state, { type: "ack", generation: 3, result: "applied" }, T0).state!;
    const a = transition(paused, { ...up(r2), restoreFs: "snap-1" } as SandboxEvent, T0 + 1).state!;
    const restored = transition(transition(a, observe("Paused", 4, false), T0 + 2).state, { type: "ack", generation: 4, result: "applied" }, T0 + 3).state!;
    expect(restoreNeeds(restored, "snap-1")).toBe(false);
    const b = transition(restored, up(r3), T0 + 4);
    expect(b.effects[0]).toMatchObject({ kind: "intent" });
    expect((b.effects[0] as { intent: { restoreFs?: unknown } }).intent.restoreFs).toBeUndefined();
  });
});

describe("a sandbox's event list", () => {
  it("keeps the steps others took on it, newest last and bounded, also on a failed sandbox; each hook run is one too", () => {
    const s = running();
    const note = (i: number) => ({ at: T0 + i, type: "Normal" as const, reason: `Step${i}`, message: `step ${i}`, source: "SandboxUpdateOps roll" });
    const one = transition(s, { type: "record", notes: [note(1)] }, T0 + 1);
    expect(one.effects).toEqual([]);
    expect(one.state!.events).toEqual([note(1)]);
    const many = transition(one.state, { type: "record", notes: Array.from({ length: MAX_SANDBOX_EVENTS + 5 }, (_, i) => note(i + 2)) }, T0 + 2).state!;
    expect(many.events).toHaveLength(MAX_SANDBOX_EVENTS);
    expect(many.events!.at(-1)!.reason).toBe(`Step${MAX_SANDBOX_EVENTS + 6}`);
    const failed = transition(transition(s, up(r2), T0 + 3).state, observe("Failed", 3, false), T0 + 4).state!;
    expect(failed.phase).toBe("Failed");
    const warn = { ...note(9), type: "Warning" as const, reason: "UpgradeFailed" };
    expect(transition(failed, { type: "record", notes: [warn] }, T0 + 5).state!.events).toEqual([warn]);
    const hooked = transition(s, { type: "hook", condition: { type: "PrePauseHook", status: "False", reason: "ExitCode", message: "exit 3" } }, T0 + 6).state!;
    expect(hooked.events).toEqual([{ at: T0 + 6, type: "Warning", reason: "PrePauseHook", message: "ExitCode: exit 3", source: "lifecycle hook" }]);
  });
});
