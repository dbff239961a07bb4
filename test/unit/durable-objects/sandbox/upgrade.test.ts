// The sandbox machine's `upgrade` event (an update ops run's Recreate) and its outcome as the run
// reads it: idempotent by (revision, attempt), a paused sandbox stays paused, a failed upgrade is
// retried by the next attempt.
import { describe, expect, it } from "vitest";
import { transition } from "../../../../durable-objects/sandbox/machine.ts";
import type { SandboxEvent } from "../../../../durable-objects/sandbox/events.ts";
import type { SandboxState } from "../../../../durable-objects/sandbox/state.ts";
import { upgradeOutcome } from "../../../../durable-objects/sandbox/upgrade.ts";
import type { Observation, TemplateSpec } from "../../../../schema/protocol/index.ts";

const T0 = 1_800_000_000_000;
const r1: TemplateSpec = { id: "base", revision: "r1", image: "base", user: "user", workdir: "/home/user", resources: { cpuCount: 1, memoryMB: 512 } };
const r2: TemplateSpec = { ...r1, revision: "r2" };

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
    expect(upgradeOutcome(done, "r2", 1)).toEqual({ status: "succeeded", restorePending: true });
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
});
