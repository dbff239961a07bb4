// Table-driven tests of the pure sandbox machine: (state, event, now) → (state, effects, result).
import { describe, expect, it } from "vitest";
import { dueAt, FAILED_RETAIN_MS, PURGE_GRACE_MS, TIMEOUT_PAUSE_DEFER_MS, transition, visibleTo } from "../../../../durable-objects/sandbox/machine.ts";
import type { SandboxEvent } from "../../../../durable-objects/sandbox/events.ts";
import { restarting, type SandboxSpec, type SandboxState } from "../../../../durable-objects/sandbox/state.ts";
import type { Observation } from "../../../../schema/protocol/index.ts";
import { indexRow, routeInfo, sandboxInfo } from "../../../../durable-objects/sandbox/info.ts";
import { held } from "../../../../durable-objects/sandbox/quota-link.ts";
import { TOMBSTONE_PHASE } from "../../../../durable-objects/store/sandbox-index.ts";

const T0 = 1_800_000_000_000;
const S = 1000;

function spec(over: Partial<SandboxSpec> = {}): SandboxSpec {
  return {
    id: "abc",
    teamId: "team",
    keyId: "key",
    templateId: "base",
    cluster: "local",
    template: { id: "base", revision: "r1", image: "base", user: "user", workdir: "/home/user", resources: { cpuCount: 1, memoryMB: 512 } },
    envdVersion: "0.6.4",
    cpuCount: 1,
    memoryMB: 512,
    diskSizeMB: 1024,
    envVars: { A: "1" },
    metadata: {},
    labels: {},
    allowInternetAccess: null,
    network: null,
    volumeMounts: [],
    lifecycle: { onTimeout: "kill", autoResume: false, timeoutPauseStrategy: "Freeze" },
    pauseStrategy: "Freeze",
    pausedRetentionMs: null,
    neverTimeout: false,
    envdAccessToken: "tok",
    trafficAccessToken: null,
    ...over,
  };
}

/** A sandbox created at T0 with a 300 s lifetime, moved to `phase` with generation `gen`. */
function at(phase: SandboxState["phase"], over: Partial<SandboxState> = {}, specOver: Partial<SandboxSpec> = {}): SandboxState {
  const created = transition(null, { type: "create", spec: spec(specOver), timeoutS: 300, generation: 2, endpoint: null }, T0).state!;
  return { ...created, phase, ...over };
}

function obs(phase: Observation["phase"], generation: number, ready = phase === "Running"): SandboxEvent {
  return { type: "observe", obs: { sandboxId: "abc" as Observation["sandboxId"], generation, phase, ready, endpoint: { runtime: "http://10.0.0.1:49983" }, observedAt: T0 } };
}

interface Row {
  name: string;
  from: SandboxState | null;
  ev: SandboxEvent;
  now?: number;
  /** Expected phase (null: the sandbox is forgotten). */
  phase: SandboxState["phase"] | null;
  state?: Partial<SandboxState>;
  effects: string[];
  result?: { ok: boolean; code?: string; resumed?: boolean };
}

const rows: Row[] = [
  { name: "create starts Pending and sends the first owner intent", from: null, ev: { type: "create", spec: spec(), timeoutS: 60, generation: 5, endpoint: null }, phase: "Pending", state: { generation: 5, endAt: T0 + 60 * S, desired: "running" }, effects: ["intent:running:5", "index"] },
  { name: "create with never-timeout has no end", from: null, ev: { type: "create", spec: spec({ neverTimeout: true }), timeoutS: 60, generation: 1, endpoint: null }, phase: "Pending", state: { endAt: null }, effects: ["intent:running:1", "index"] },
  { name: "create over an existing sandbox is a conflict", from: at("Running"), ev: { type: "create", spec: spec(), timeoutS: 60, generation: 9, endpoint: null }, phase: "Running", effects: [], result: { ok: false, code: "conflict" } },
  { name: "ack applied of the current generation makes it Running", from: at("Pending"), ev: { type: "ack", generation: 2, result: "applied" }, phase: "Running", effects: [] },
  { name: "ack accepted leaves it Pending", from: at("Pending"), ev: { type: "ack", generation: 2, result: "accepted" }, phase: "Pending", effects: [] },
  { name: "ack of an older generation is ignored", from: at("Pending"), ev: { type: "ack", generation: 1, result: "applied" }, phase: "Pending", effects: [] },
  { name: "ack rejected fails the sandbox", from: at("Pending"), ev: { type: "ack", generation: 2, result: "rejected", message: "no image" }, phase: "Failed", effects: ["index"] },
  { name: "a Running+ready observation of this generation makes it Running", from: at("Pending"), ev: obs("Running", 2), phase: "Running", state: { endpoint: { runtime: "http://10.0.0.1:49983" }, observedGeneration: 2 }, effects: [] },
  { name: "an observation of the pool's older generation is dropped", from: at("Pending"), ev: obs("Running", 1), phase: "Pending", state: { endpoint: null }, effects: [] },
  { name: "Running but not ready keeps it Pending", from: at("Pending"), ev: obs("Running", 2, false), phase: "Pending", effects: [] },
  { name: "Deleted while wanted running is a failure", from: at("Running"), ev: obs("Deleted", 2), phase: "Failed", effects: ["index"] },
  { name: "Failed observation fails it", from: at("Running"), ev: obs("Failed", 2), phase: "Failed", effects: ["index"] },
  { name: "kill sends a delete intent and starts the purge grace", from: at("Running"), ev: { type: "kill" }, now: T0 + S, phase: "Terminating", state: { generation: 3, desired: "deleted", purgeAt: T0 + S + PURGE_GRACE_MS, killedAt: T0 + S }, effects: ["intent:deleted:3", "index"] },
  { name: "kill of a Failed sandbox is allowed", from: at("Failed"), ev: { type: "kill" }, phase: "Terminating", effects: ["intent:deleted:3", "index"] },
  { name: "kill twice is not found", from: at("Terminating", { desired: "deleted" }), ev: { type: "kill" }, phase: "Terminating", effects: [], result: { ok: false, code: "sandbox_not_found" } },
  { name: "abandon (a create that did not complete) kills a Pending sandbox", from: at("Pending"), ev: { type: "abandon" }, now: T0 + S, phase: "Terminating", state: { generation: 3, desired: "deleted", purgeAt: T0 + S + PURGE_GRACE_MS }, effects: ["intent:deleted:3", "index"] },
  { name: "abandon kills a sandbox the agent failed", from: at("Failed"), ev: { type: "abandon" }, phase: "Terminating", effects: ["intent:deleted:3", "index"] },
  { name: "abandon of a sandbox a kill already took is a no-op, not a refusal", from: at("Terminating", { desired: "deleted", generation: 3 }), ev: { type: "abandon" }, phase: "Terminating", state: { generation: 3 }, effects: [] },
  { name: "abandon of a sandbox already gone is a no-op", from: null, ev: { type: "abandon" }, phase: null, effects: [] },
  { name: "Deleted observed after kill forgets the sandbox", from: at("Terminating", { desired: "deleted", generation: 3 }), ev: obs("Deleted", 3), phase: null, effects: ["purge"] },
  { name: "setTimeout overwrites the end (may shorten)", from: at("Running"), ev: { type: "setTimeout", timeoutS: 5 }, now: T0 + 10 * S, phase: "Running", state: { endAt: T0 + 15 * S }, effects: ["index"] },
  { name: "setTimeout on a paused sandbox is a conflict", from: at("Paused"), ev: { type: "setTimeout", timeoutS: 5 }, phase: "Paused", effects: [], result: { ok: false, code: "conflict" } },
  { name: "setTimeout on a failed sandbox is not found", from: at("Failed"), ev: { type: "setTimeout", timeoutS: 5 }, phase: "Failed", effects: [], result: { ok: false, code: "sandbox_not_found" } },
  { name: "refresh only extends", from: at("Running"), ev: { type: "refresh", durationS: 10 }, phase: "Running", state: { endAt: T0 + 300 * S }, effects: [] },
  { name: "pause sends a paused intent with the template's strategy", from: at("Running"), ev: { type: "pause" }, phase: "Pausing", state: { desired: "paused", pauseStrategy: "Freeze", generation: 3, retainUntil: null }, effects: ["intent:paused:3", "index"] },
  { name: "pause with memory:false uses Stop and the retention", from: at("Running", {}, { pausedRetentionMs: 3600 * S }), ev: { type: "pause", strategy: "Stop" }, now: T0 + S, phase: "Pausing", state: { pauseStrategy: "Stop", retainUntil: T0 + S + 3600 * S }, effects: ["intent:paused:3", "index"] },
  { name: "pause twice is already_paused (409)", from: at("Paused"), ev: { type: "pause" }, phase: "Paused", effects: [], result: { ok: false, code: "already_paused" } },
  { name: "pause while resuming is a conflict", from: at("Resuming"), ev: { type: "pause" }, phase: "Resuming", effects: [], result: { ok: false, code: "conflict" } },
  { name: "Paused observed completes the pause", from: at("Pausing", { desired: "paused" }), ev: obs("Paused", 2), phase: "Paused", effects: [] },
  { name: "connect on a running sandbox extends only", from: at("Running"), ev: { type: "connect", timeoutS: 10 }, phase: "Running", state: { endAt: T0 + 300 * S, generation: 2 }, effects: [], result: { ok: true } },
  { name: "connect with a longer timeout extends", from: at("Running"), ev: { type: "connect", timeoutS: 600 }, now: T0 + S, phase: "Running", state: { endAt: T0 + S + 600 * S }, effects: ["index"] },
  { name: "connect on a paused sandbox resumes with a 300 s floor", from: at("Paused", { desired: "paused", endAt: T0 }), ev: { type: "connect", timeoutS: 10 }, now: T0 + 100 * S, phase: "Resuming", state: { desired: "running", generation: 3, endAt: T0 + 400 * S }, effects: ["intent:running:3", "index"], result: { ok: true, resumed: true } },
  { name: "connect without memory on a frozen sandbox is refused", from: at("Paused", { desired: "paused" }), ev: { type: "connect", timeoutS: 10, memory: false }, phase: "Paused", effects: [], result: { ok: false, code: "bad_request" } },
  { name: "resume completes on a ready observation (paused → running: indexed)", from: at("Resuming", { generation: 3 }), ev: obs("Running", 3), phase: "Running", effects: ["index"] },
  { name: "wake on a running sandbox is a no-op", from: at("Running"), ev: { type: "wake" }, phase: "Running", effects: [], result: { ok: true, resumed: false } },
  { name: "wake on a paused sandbox without autoResume is refused", from: at("Paused", { desired: "paused" }), ev: { type: "wake" }, phase: "Paused", effects: [], result: { ok: false, code: "conflict" } },
  { name: "wake resumes a frozen sandbox with autoResume", from: at("Paused", { desired: "paused" }, { lifecycle: { onTimeout: "pause", autoResume: true, timeoutPauseStrategy: "Freeze" } }), ev: { type: "wake" }, phase: "Resuming", effects: ["intent:running:3", "index"], result: { ok: true, resumed: true } },
  { name: "wake does not resume a sandbox whose last resume failed (a connect does): no retry loop from traffic", from: at("Paused", { desired: "paused", resumeFailure: { generation: 2, reason: "ReadyCommandFailed", message: "boom", at: T0 } }, { lifecycle: { onTimeout: "pause", autoResume: true, timeoutPauseStrategy: "Freeze" } }), ev: { type: "wake" }, phase: "Paused", effects: [], result: { ok: false, code: "sandbox_resume_failed" } },
  { name: "connect still resumes a sandbox whose last resume failed", from: at("Paused", { desired: "paused", resumeFailure: { generation: 2, reason: "ReadyCommandFailed", message: "boom", at: T0 } }, { lifecycle: { onTimeout: "pause", autoResume: true, timeoutPauseStrategy: "Freeze" } }), ev: { type: "connect", timeoutS: 60 }, phase: "Resuming", effects: ["intent:running:3", "index"], result: { ok: true, resumed: true } },
  { name: "wake refuses a sandbox paused without memory", from: at("Paused", { desired: "paused", pauseStrategy: "Stop" }, { lifecycle: { onTimeout: "pause", autoResume: true, timeoutPauseStrategy: "Freeze" } }), ev: { type: "wake" }, phase: "Paused", effects: [], result: { ok: false, code: "conflict" } },
  { name: "alarm at end of life kills (onTimeout kill)", from: at("Running"), ev: { type: "alarm" }, now: T0 + 300 * S, phase: "Terminating", effects: ["intent:deleted:3", "index"] },
  { name: "alarm at end of life pauses (onTimeout pause) with the lifecycle strategy", from: at("Running", {}, { lifecycle: { onTimeout: "pause", autoResume: false, timeoutPauseStrategy: "Stop" } }), ev: { type: "alarm" }, now: T0 + 300 * S, phase: "Pausing", state: { pauseStrategy: "Stop" }, effects: ["intent:paused:3", "index"] },
  { name: "alarm whose auto-pause the team quota refuses over the limit kills, with a Warning", from: at("Running", {}, { lifecycle: { onTimeout: "pause", autoResume: false, timeoutPauseStrategy: "Stop" } }), ev: { type: "alarm", pauseRefused: { code: "quota_exceeded", message: "over" } }, now: T0 + 300 * S, phase: "Terminating", state: { events: [expect.objectContaining({ type: "Warning", reason: "TimeoutPauseRefused" })] }, effects: ["intent:deleted:3", "index"] },
  { name: "alarm whose auto-pause the team quota cannot answer keeps it running and puts the pause off 5 s", from: at("Running", {}, { lifecycle: { onTimeout: "pause", autoResume: false, timeoutPauseStrategy: "Stop" } }), ev: { type: "alarm", pauseRefused: { code: "quota_unavailable", message: "down" } }, now: T0 + 300 * S, phase: "Running", state: { endAt: T0 + 305 * S, timeoutPauseDeferrals: 1, events: [expect.objectContaining({ type: "Warning", reason: "TimeoutPauseDeferred" })] }, effects: ["index"] },
  { name: "alarm whose auto-pause the team quota could not answer on the last try pauses anyway (uncounted), with a Warning", from: at("Running", { timeoutPauseDeferrals: TIMEOUT_PAUSE_DEFER_MS.length }, { lifecycle: { onTimeout: "pause", autoResume: false, timeoutPauseStrategy: "Stop" } }), ev: { type: "alarm", pauseRefused: { code: "quota_unavailable", message: "down" } }, now: T0 + 300 * S, phase: "Pausing", state: { pauseStrategy: "Stop", events: [expect.objectContaining({ type: "Warning", reason: "TimeoutPauseUncounted" })] }, effects: ["intent:paused:3", "index"] },
  { name: "an early alarm does nothing", from: at("Running"), ev: { type: "alarm" }, now: T0 + 299 * S, phase: "Running", effects: [] },
  { name: "alarm at the end of paused retention kills", from: at("Paused", { desired: "paused", retainUntil: T0 + 10 * S }), ev: { type: "alarm" }, now: T0 + 10 * S, phase: "Terminating", effects: ["intent:deleted:3", "index"] },
  { name: "alarm after the purge grace forgets a terminating sandbox", from: at("Terminating", { purgeAt: T0 + S }), ev: { type: "alarm" }, now: T0 + S, phase: null, effects: ["purge"] },
];

function describeEffects(effects: ReturnType<typeof transition>["effects"]): string[] {
  return effects.map((e) => (e.kind === "intent" ? `intent:${e.intent.desired.state}:${e.intent.generation}` : e.kind));
}

describe("sandbox machine", () => {
  it.each(rows)("$name", (row) => {
    const before = row.from && structuredClone(row.from);
    const t = transition(row.from, row.ev, row.now ?? T0);
    expect(t.state?.phase ?? null).toBe(row.phase);
    if (row.state) expect(t.state).toMatchObject(row.state);
    expect(describeEffects(t.effects)).toEqual(row.effects);
    if (row.result) {
      expect(t.result.ok).toBe(row.result.ok);
      if (!t.result.ok) expect(t.result.error.code).toBe(row.result.code);
      else if (row.result.resumed !== undefined) expect(t.result.resumed ?? false).toBe(row.result.resumed);
    } else expect(t.result.ok).toBe(true);
    // Pure: the input state is never mutated.
    expect(row.from).toEqual(before);
  });

  it("carries the claim's token, env vars and template in every intent", () => {
    const t = transition(null, { type: "create", spec: spec({ labels: { tier: "gold" }, allowInternetAccess: false }), timeoutS: 60, generation: 2, endpoint: null }, T0);
    const intent = t.effects.find((e) => e.kind === "intent");
    expect(intent).toMatchObject({ intent: { sandboxId: "abc", owner: { kind: "sandbox" }, envdAccessToken: "tok", envVars: { A: "1" }, labels: { tier: "gold" }, allowInternetAccess: false, template: { id: "base", revision: "r1" } } });
  });

  it("hands back the very same state when an agent or timer event changes nothing (the shell then skips its write)", () => {
    const pending = at("Pending", { endpoint: { runtime: "http://10.0.0.1:49983" } });
    const acked = transition(pending, { type: "ack", generation: 2, result: "applied" }, T0 + S).state!;
    expect(acked).toMatchObject({ phase: "Running", observedGeneration: 2 });
    expect(transition(acked, obs("Running", 2), T0 + 2 * S).state).toBe(acked);
    expect(transition(acked, { type: "ack", generation: 2, result: "applied" }, T0 + 2 * S).state).toBe(acked);
    expect(transition(acked, { type: "alarm" }, T0 + 2 * S).state).toBe(acked);
    expect(transition(acked, obs("Running", 2, false), T0 + 2 * S).state).toMatchObject({ phase: "Running", conditions: expect.arrayContaining([expect.objectContaining({ type: "Ready", status: "False" })]) });
    expect(transition(acked, { ...obs("Running", 2), obs: { ...(obs("Running", 2) as { obs: Observation }).obs, endpoint: { runtime: "http://10.0.0.2:49983" } } } as SandboxEvent, T0 + 2 * S).state).not.toBe(acked);
  });

  it("abandon of a terminating sandbox hands back the very same state (nothing to write)", () => {
    const s = at("Terminating", { desired: "deleted", generation: 3 });
    expect(transition(s, { type: "abandon" }, T0).state).toBe(s);
  });

  it("bumps the index revision on every index write", () => {
    const s = at("Running");
    const paused = transition(s, { type: "pause" }, T0).state!;
    expect(paused.rev).toBe(s.rev + 1);
  });

  it("dueAt picks the timer of the phase", () => {
    expect(dueAt(at("Running"))).toBe(T0 + 300 * S);
    expect(dueAt(at("Paused", { retainUntil: null }))).toBeNull();
    expect(dueAt(at("Terminating", { purgeAt: 7 }))).toBe(7);
    expect(dueAt(null)).toBeNull();
  });

  it("shows a sandbox to every key of its team and the admin only, never while terminating", () => {
    expect(visibleTo(at("Running"), { teamId: "team", admin: false })).toBe(true);
    expect(visibleTo(at("Running"), { teamId: "other", admin: false })).toBe(false);
    expect(visibleTo(at("Running"), { teamId: "other", admin: true })).toBe(true);
    expect(visibleTo(at("Terminating"), { teamId: "team", admin: true })).toBe(false);
    expect(visibleTo(null, { teamId: "team", admin: true })).toBe(false);
  });
  it("a Failed sandbox is killed FAILED_RETAIN_MS after it failed (never-timeout too), its event list saying why; a failed upgrade is kept for its ops run's retry", () => {
    const failed = (from: SandboxState, now: number) => transition(from, { type: "observe", obs: { ...(obs("Failed", from.generation) as { obs: Observation }).obs, reason: "ReadyCommandFailed", message: "exit 1" } }, now).state!;
    const hour = T0 + 3600 * S;
    for (const from of [at("Running", { endAt: hour }), at("Running", { endAt: null }, { neverTimeout: true }), at("Pausing", { endAt: hour })]) {
      const s = failed(from, T0 + 10 * S);
      expect(s).toMatchObject({ phase: "Failed", endAt: T0 + 10 * S + FAILED_RETAIN_MS });
      expect(s.events?.at(-1)).toMatchObject({ type: "Warning", reason: "ReadyCommandFailed", message: expect.stringMatching(/^failed: exit 1; killed \(its host side deleted\) by .* at the latest, counted against the team quota/) });
      // A second report of the failure moves nothing.
      expect(failed(s, T0 + 60 * S)).toMatchObject({ endAt: T0 + 10 * S + FAILED_RETAIN_MS, events: s.events });
      expect(dueAt(s)).toBe(T0 + 10 * S + FAILED_RETAIN_MS);
      expect(transition(s, { type: "alarm" }, T0 + 10 * S + FAILED_RETAIN_MS - 1).state!.phase).toBe("Failed");
      const killed = transition(s, { type: "alarm" }, T0 + 10 * S + FAILED_RETAIN_MS);
      expect(killed.state).toMatchObject({ phase: "Terminating", desired: "deleted" });
      expect(killed.effects.map((e) => e.kind)).toEqual(["intent", "index"]);
    }
    // An end already sooner stays.
    expect(failed(at("Running", { endAt: T0 + 20 * S }), T0 + 10 * S).endAt).toBe(T0 + 20 * S);
    const upgrading = at("Running", { generation: 3, endAt: hour, upgrade: { revision: "r2", attempt: 1, generation: 3, paused: false, done: false } });
    expect(failed(upgrading, T0 + 10 * S)).toMatchObject({ phase: "Failed", endAt: hour });
  });

  it("a resume the agent fails goes back to paused as it was paused (the next generation, its files kept), its reason kept; a later connect resumes it again", () => {
    const hour = T0 + 3600 * S;
    const failedObs = (from: SandboxState, reason = "ReadyCommandFailed", message = "the template's ready command did not pass within 8 s"): SandboxEvent => ({
      type: "observe",
      obs: { ...(obs("Failed", from.generation) as { obs: Observation }).obs, reason, message },
    });
    for (const strategy of ["Stop", "Freeze"] as const) {
      const paused = at("Paused", { desired: "paused", pauseStrategy: strategy, endAt: hour, generation: 3 }, { pausedRetentionMs: 7200 * S });
      const resuming = transition(paused, { type: "connect", timeoutS: 300 }, T0 + S).state!;
      expect(resuming).toMatchObject({ phase: "Resuming", generation: 4, retainUntil: null });
      const t = transition(resuming, failedObs(resuming), T0 + 10 * S);
      // A pause of the same strategy, one generation on, retained from now as any pause.
      expect(describeEffects(t.effects)).toEqual(["intent:paused:5", "index"]);
      const intent = t.effects.find((e) => e.kind === "intent") as Extract<(typeof t.effects)[number], { kind: "intent" }>;
      expect(intent.intent.desired).toEqual({ state: "paused", pauseStrategy: strategy });
      const back = t.state!;
      expect(back).toMatchObject({ phase: "Pausing", desired: "paused", pauseStrategy: strategy, generation: 5, retainUntil: T0 + 10 * S + 7200 * S, resumeFailure: { generation: 4, reason: "ReadyCommandFailed", message: "the template's ready command did not pass within 8 s", at: T0 + 10 * S } });
      expect(back.conditions).toContainEqual(expect.objectContaining({ type: "SandboxResumed", status: "False", reason: "ResumeFailed", message: "ReadyCommandFailed: the template's ready command did not pass within 8 s" }));
      expect(back.events?.at(-1)).toMatchObject({ type: "Warning", reason: "ReadyCommandFailed", message: `failed to resume: the template's ready command did not pass within 8 s; paused again (${strategy}), its files kept: connect resumes it again` });
      // E2B sees it paused throughout (never the 404 of a Failed one), and it holds a paused slot,
      // not a running one.
      expect(sandboxInfo(back).state).toBe("paused");
      expect(held(back)).toBe(strategy === "Stop" ? "stopped" : "frozen");
      expect(dueAt(back)).toBe(T0 + 10 * S + 7200 * S);
      // The agent's report of the pause: Paused, the reason still on SandboxResumed.
      const rested = transition(back, obs("Paused", 5, false), T0 + 11 * S).state!;
      expect(rested).toMatchObject({ phase: "Paused", resumeFailure: { generation: 4 } });
      expect(rested.conditions).toContainEqual(expect.objectContaining({ type: "SandboxResumed", status: "False", reason: "ResumeFailed" }));
      expect(rested.conditions).toContainEqual(expect.objectContaining({ type: "Ready", status: "False", reason: "Paused" }));
      // Resumable again; a resume that succeeds forgets the failure.
      const again = transition(rested, { type: "connect", timeoutS: 300 }, T0 + 20 * S);
      expect(again.result).toMatchObject({ ok: true, resumed: true });
      expect(describeEffects(again.effects)).toEqual(["intent:running:6", "index"]);
      const up = transition(again.state!, obs("Running", 6), T0 + 21 * S).state!;
      expect(up.phase).toBe("Running");
      expect(up.resumeFailure).toBeUndefined();
      expect(up.conditions).toContainEqual(expect.objectContaining({ type: "SandboxResumed", status: "True", reason: "ResumePod" }));
      // A kill by id still deletes it.
      expect(transition(rested, { type: "kill" }, T0 + 30 * S).state).toMatchObject({ phase: "Terminating", desired: "deleted" });
    }
    // A rejected resume intent: the same, with IntentRejected.
    const resuming = at("Resuming", { endAt: hour, pauseStrategy: "Stop" });
    const rejected = transition(resuming, { type: "ack", generation: 2, result: "rejected", message: "bad" }, T0 + 10 * S);
    expect(describeEffects(rejected.effects)).toEqual(["intent:paused:3", "index"]);
    expect(rejected.state).toMatchObject({ phase: "Pausing", resumeFailure: { generation: 2, reason: "IntentRejected", message: "bad" } });
    // An old failure report (the resume's generation) after the pause back changes nothing.
    expect(transition(rejected.state!, failedObs(resuming), T0 + 11 * S).state).toBe(rejected.state);
  });

  it("a failed resume that cannot go back to paused: gone from its cluster (the grace), an upgrade under way (its ops run retries), or a pause back that fails too (kept to its timeout)", () => {
    const hour = T0 + 3600 * S;
    const reported = (from: SandboxState, phase: "Failed" | "Deleted", now: number) => transition(from, { type: "observe", obs: { ...(obs(phase, from.generation) as { obs: Observation }).obs, reason: "ImageNotFound", message: "no image" } }, now).state!;
    // Gone from its cluster while resuming: nothing left to keep.
    expect(reported(at("Resuming", { endAt: hour }), "Deleted", T0 + 10 * S)).toMatchObject({ phase: "Failed", endAt: T0 + 10 * S + FAILED_RETAIN_MS });
    // An upgrade under way: Failed, for its update ops run's next attempt.
    const upgrading = at("Resuming", { generation: 3, endAt: hour, upgrade: { revision: "r2", attempt: 1, generation: 3, paused: true, done: false } });
    const up = reported(upgrading, "Failed", T0 + 10 * S);
    expect(up).toMatchObject({ phase: "Failed", endAt: hour });
    expect(up.conditions).toContainEqual(expect.objectContaining({ type: "Upgrading", reason: "UpgradePodFailed" }));
    // The pause back fails too: its paused disk is kept to its own timeout (never-timeout: until
    // killed), counted, never the 10-min kill of other failures.
    const back = transition(at("Resuming", { endAt: hour }), { type: "observe", obs: { ...(obs("Failed", 2) as { obs: Observation }).obs, reason: "ReadyCommandFailed" } }, T0 + 5 * S).state!;
    const s = reported(back, "Failed", T0 + 10 * S);
    expect(s).toMatchObject({ phase: "Failed", endAt: hour });
    expect(s.events?.at(-1)).toMatchObject({ type: "Warning", reason: "ImageNotFound", message: `failed to pause again after its resume failed: no image; its paused disk is kept until ${new Date(hour).toISOString()} (its timeout), counted against the team quota as a running sandbox; kill it by id to free it` });
    expect(transition(s, { type: "alarm" }, T0 + 10 * S + FAILED_RETAIN_MS).state!.phase).toBe("Failed");
    expect(transition(s, { type: "alarm" }, hour).state).toMatchObject({ phase: "Terminating", desired: "deleted" });
    const neverBack = transition(at("Resuming", { endAt: null }, { neverTimeout: true }), { type: "ack", generation: 2, result: "rejected", message: "bad" }, T0 + 5 * S).state!;
    const never = reported(neverBack, "Failed", T0 + 10 * S);
    expect(never).toMatchObject({ phase: "Failed", endAt: null });
    expect(dueAt(never)).toBe(null);
    // A pause of a sandbox that did not fail resuming, failing: the grace, as before.
    expect(reported(at("Pausing", { endAt: hour }), "Failed", T0 + 10 * S)).toMatchObject({ phase: "Failed", endAt: T0 + 10 * S + FAILED_RETAIN_MS });
  });

  it("a failure the agent retries is a Ready=False reason, never Failed; Ready or Paused replaces it", () => {
    const retry = (phase: Observation["phase"], generation: number): SandboxEvent => {
      const e = obs(phase, generation, false) as { obs: Observation };
      const condition = { type: "Ready", status: "False" as const, reason: "ReconcileError", message: "disk full (attempt 2, retrying in 200 ms)" };
      return { type: "observe", obs: { ...e.obs, reason: "ReconcileError", message: condition.message, conditions: [condition] } };
    };
    const creating = transition(at("Pending"), retry("Pending", 2), T0 + S).state!;
    expect(creating.phase).toBe("Pending");
    expect(creating.conditions).toContainEqual(expect.objectContaining({ type: "Ready", status: "False", reason: "ReconcileError", message: "disk full (attempt 2, retrying in 200 ms)" }));
    expect(transition(creating, obs("Running", 2), T0 + 2 * S).state).toMatchObject({ phase: "Running", conditions: expect.arrayContaining([expect.objectContaining({ type: "Ready", status: "True" })]) });

    const pausing = transition(at("Running"), { type: "pause" }, T0).state!;
    const stuck = transition(pausing, retry("Running", 3), T0 + S).state!;
    expect(stuck.phase).toBe("Pausing");
    expect(stuck.conditions).toContainEqual(expect.objectContaining({ type: "Ready", reason: "ReconcileError" }));
    expect(transition(stuck, obs("Paused", 3), T0 + 2 * S).state).toMatchObject({ phase: "Paused", conditions: expect.arrayContaining([expect.objectContaining({ type: "Ready", status: "False", reason: "Paused" })]) });
  });

  it("a sandbox whose pid 1 starts again (the agent's Pending with Ready=False Pid1Restarting) is shown not ready, its requests held, still running to E2B; ready again once reported so", () => {
    const running = transition(at("Running"), obs("Running", 2), T0).state!;
    expect(restarting(running)).toBe(false);
    const message = "its init process (pid 1) ended: the sandbox starts again, its files kept and its processes gone";
    const restart = (conditions: Observation["conditions"]): SandboxEvent => {
      const e = obs("Pending", 2, false) as { obs: Observation };
      return { type: "observe", obs: { ...e.obs, message, conditions } };
    };
    const told = restart([{ type: "Ready", status: "False", reason: "Pid1Restarting", message }]);
    const t = transition(running, told, T0 + S);
    const down = t.state!;
    expect(down.phase).toBe("Running");
    expect(down.conditions).toContainEqual({ type: "Ready", status: "False", reason: "Pid1Restarting", message, lastTransitionTime: T0 + S });
    expect(restarting(down)).toBe(true);
    expect(routeInfo(down)).toMatchObject({ phase: "Running", state: "running", restarting: true });
    // What list and get show is unchanged: no index write.
    expect(t.effects).toEqual([]);
    expect(sandboxInfo(down).state).toBe("running");
    // Told again (a reconnect's inventory): the very same state, no write.
    expect(transition(down, told, T0 + 2 * S).state).toBe(down);
    // Back: the next report is Running and ready.
    const up = transition(down, obs("Running", 2), T0 + 3 * S).state!;
    expect(up.conditions).toContainEqual(expect.objectContaining({ type: "Ready", status: "True", reason: "RuntimeReady" }));
    expect(routeInfo(up).restarting).toBe(false);

    // Only that reason holds requests: any other not-ready reason of a running sandbox does not.
    const retried = transition(running, restart([{ type: "Ready", status: "False", reason: "ReconcileError", message: "x" }]), T0 + S).state!;
    expect(routeInfo(retried).restarting).toBe(false);
    // A sandbox not yet running (create) or pausing meanwhile is answered as such, not held.
    expect(restarting(transition(at("Pending"), told, T0 + S).state!)).toBe(false);
    expect(restarting(transition(down, { type: "pause" }, T0 + 2 * S).state!)).toBe(false);
  });

  it("a snapshot is the next generation with the same desired state, only while running or paused; its ack (taken or not) never fails the sandbox", () => {
    const intentOf = (t: ReturnType<typeof transition>) => (t.effects[0] as Extract<(typeof t.effects)[number], { kind: "intent" }>).intent;
    for (const phase of ["Running", "Paused"] as const) {
      const s = at(phase, { desired: phase === "Running" ? "running" : "paused" });
      const t = transition(s, { type: "snapshot", snapshotId: "snap1" }, T0);
      expect(t.result.ok).toBe(true);
      expect(t.effects.map((e) => e.kind)).toEqual(["intent"]);
      expect(intentOf(t)).toMatchObject({ generation: s.generation + 1, desired: { state: s.desired }, snapshot: { id: "snap1" } });
      expect(t.state).toMatchObject({ phase, snapshot: { id: "snap1", generation: s.generation + 1 } });
      // Acked either way: asked no more, the phase as it was; a later intent does not carry it.
      const acked = transition(t.state, { type: "ack", generation: s.generation + 1, result: "applied" }, T0 + S).state!;
      expect(acked).toMatchObject({ phase, snapshot: null });
      expect(intentOf(transition(acked, { type: "kill" }, T0 + 2 * S)).snapshot).toBeUndefined();
    }
    for (const phase of ["Pending", "Pausing", "Resuming"] as const) {
      expect(transition(at(phase), { type: "snapshot", snapshotId: "snap1" }, T0).result).toMatchObject({ ok: false, error: { code: "conflict" } });
    }
    expect(transition(at("Terminating"), { type: "snapshot", snapshotId: "snap1" }, T0).result).toMatchObject({ ok: false, error: { code: "sandbox_not_found" } });
    // A sandbox made from a snapshot names it in every intent.
    const fromSnap = at("Running", {}, { restoreFrom: { id: "snap1" } });
    expect(intentOf(transition(fromSnap, { type: "pause" }, T0)).restoreFrom).toEqual({ id: "snap1" });
  });
});

describe("the index row of a killed sandbox", () => {
  it("is its tombstone from the kill on (state killed, gone as of the kill, at the kill's revision), so the destroy has none to write", () => {
    const killed = transition(at("Running"), { type: "kill" }, T0 + S).state!;
    expect(indexRow(killed)).toMatchObject({ id: "abc", state: "killed", phase: TOMBSTONE_PHASE, endAt: T0 + S, rev: killed.rev });
    // The same row every time it is written (a redelivery, the outbox): nothing newer follows it.
    expect(indexRow({ ...killed })).toEqual(indexRow(killed));
  });

  it("of one killed before `killedAt` was kept stays the row of a sandbox being deleted (its destroy writes the tombstone)", () => {
    const old = at("Terminating", { desired: "deleted", generation: 3, purgeAt: T0 + PURGE_GRACE_MS });
    expect(indexRow(old)).toMatchObject({ state: "killed", phase: "Terminating" });
  });

  it("mirrors the driver's SeccompFiltered condition as told: set by an observation carrying it, kept by one that does not, changed by the next it carries", () => {
    const running = transition(at("Pending", { endpoint: { runtime: "http://10.0.0.1:49983" } }), obs("Running", 2), T0).state!;
    const told = (ev: SandboxEvent, conditions: Observation["conditions"]): SandboxEvent => (ev.type === "observe" ? { ...ev, obs: { ...ev.obs, conditions } } : ev);
    const unfiltered = { type: "SeccompFiltered", status: "False" as const, reason: "UnfilteredHolder", message: "its holder (pid 1) was started by an older agent without the seccomp filter" };
    const a = transition(running, told(obs("Running", 2), [unfiltered]), T0 + S).state!;
    expect(a.conditions.find((c) => c.type === "SeccompFiltered")).toEqual({ ...unfiltered, lastTransitionTime: T0 + S });
    // Told again: the very same state (no write); not told: kept.
    expect(transition(a, told(obs("Running", 2), [unfiltered]), T0 + 2 * S).state).toBe(a);
    expect(transition(a, obs("Running", 2), T0 + 2 * S).state).toBe(a);
    const paused = transition(a, told(obs("Paused", 2), [{ type: "Ready", status: "False", reason: "ReconcileError", message: "x" }]), T0 + 2 * S).state!;
    expect(paused.conditions.find((c) => c.type === "SeccompFiltered")).toMatchObject({ status: "False", reason: "UnfilteredHolder" });
    const b = transition(a, told(obs("Running", 2), [{ type: "SeccompFiltered", status: "True", reason: "HolderRestarted" }]), T0 + 3 * S).state!;
    expect(b.conditions.find((c) => c.type === "SeccompFiltered")).toEqual({ type: "SeccompFiltered", status: "True", reason: "HolderRestarted", lastTransitionTime: T0 + 3 * S });
    // Only the driver's own types: another condition an agent reports is not taken as a sandbox condition.
    expect(transition(running, told(obs("Running", 2), [{ type: "Upgrading", status: "True", reason: "Succeeded" }]), T0 + S).state!.conditions.map((c) => c.type)).not.toContain("Upgrading");
  });
});
