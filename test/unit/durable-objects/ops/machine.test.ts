// The update ops machine: selection, batches under maxUnavailable (updating and failed members
// counted), paused, the end states, resume after failure.
import { describe, expect, it } from "vitest";
import { active, checkpointDue, counts, freeDue, heldSnapshots, hookDue, MAX_FREE_ATTEMPTS, nextFreeAt, snapshotsFreedOnDelete, inFlight, initialState, MAX_EVENTS, newEvents, restoredMessage, transition, type OpsInput, type OpsState } from "../../../../durable-objects/ops/machine.ts";
import { UpdateOpsSpec } from "../../../../schema/api/update-ops.ts";
import type { OpsCandidate, UpgradeOutcome } from "../../../../durable-objects/sandbox/upgrade.ts";

const NOW = 1_000_000;

function sandboxes(n: number, over: Partial<OpsCandidate> = {}): OpsCandidate[] {
  return Array.from({ length: n }, (_, i) => ({ id: `s${String(i).padStart(3, "0")}`, templateId: "t", cluster: "local", labels: { app: "a" }, phase: "Running" as const, revision: "r1", ...over }));
}

function run(spec: unknown, candidates: OpsCandidate[], targets: Record<string, string | null> = { t: "r2" }): OpsState {
  const s = initialState("ops", "team", UpdateOpsSpec.parse(spec), NOW);
  return transition(s, { type: "select", candidates, targets }, NOW);
}

const step = (s: OpsState, ev: OpsInput) => transition(s, ev, NOW + 1);
const outcome = (s: OpsState, status: UpgradeOutcome["status"], message?: string) => step(s, { type: "progress", outcomes: Object.fromEntries(inFlight(s).map((m) => [m.id, { status, message }])) });
const updating = (s: OpsState) => inFlight(s).map((m) => m.id);

describe("update ops machine", () => {
  it("selects by label selector, stateFilter and revision, in id order", () => {
    const c: OpsCandidate[] = [
      { id: "b", templateId: "t", cluster: "local", labels: { app: "a" }, phase: "Running", revision: "r1" },
      { id: "a", cluster: "local", templateId: "t", labels: { app: "a" }, phase: "Paused", revision: "r1" },
      { id: "c", cluster: "local", templateId: "t", labels: { app: "other" }, phase: "Running", revision: "r1" },
      { id: "d", cluster: "local", templateId: "t", labels: { app: "a" }, phase: "Running", revision: "r2" }, // already there
      { id: "e", cluster: "local", templateId: "t", labels: { app: "a" }, phase: "Pausing", revision: "r1" },
      { id: "f", cluster: "local", templateId: "gone", labels: { app: "a" }, phase: "Running", revision: "r1" },
    ];
    const s = run({ selector: { matchLabels: { app: "a" } }, stateFilter: { states: ["Running", "Paused"] }, updateStrategy: { maxUnavailable: 5 } }, c, { t: "r2", gone: null });
    expect(s.members.map((m) => [m.id, m.paused])).toEqual([["a", true], ["b", false]]);
    expect(s.events.map((e) => e.reason)).toContain("TemplateNotFound");
    const runningOnly = run({ selector: { matchExpressions: [{ key: "app", operator: "In", values: ["a"] }] } }, c, { t: "r2", gone: null });
    expect(runningOnly.members.map((m) => m.id)).toEqual(["b"]);
  });

  it("upgrades in batches of maxUnavailable, a percentage of the members rounded up", () => {
    let s = run({ selector: {}, updateStrategy: { maxUnavailable: "10%" } }, sandboxes(25)); // ceil(2.5) = 3
    expect(updating(s)).toEqual(["s000", "s001", "s002"]);
    s = step(s, { type: "progress", outcomes: { s000: { status: "succeeded" }, s001: { status: "updating" }, s002: { status: "waiting" } } });
    expect(updating(s)).toEqual(["s001", "s002", "s003"]);
    let rounds = 0;
    while (s.phase === "Updating" && rounds++ < 100) s = outcome(s, "succeeded");
    expect(s.phase).toBe("Completed");
    expect(counts(s)).toEqual({ replicas: 25, updatedReplicas: 25, failedReplicas: 0, updatingReplicas: 0 });
    expect(s.conditions[0]).toMatchObject({ type: "Progressing", status: "False", reason: "Completed" });
  });

  it("counts failed members against maxUnavailable, fails a sandbox alone, and the run once failures use the budget", () => {
    let s = run({ selector: {}, updateStrategy: { maxUnavailable: 2 } }, sandboxes(5));
    s = step(s, { type: "progress", outcomes: { s000: { status: "failed", message: "UpgradePodFailed: boom" }, s001: { status: "succeeded" } } });
    // One failed holds one slot: one more starts, not two.
    expect(updating(s)).toEqual(["s002"]);
    expect(s.members.find((m) => m.id === "s000")).toMatchObject({ status: "Failed", message: "UpgradePodFailed: boom" });
    s = outcome(s, "failed", "again");
    expect(s.phase).toBe("Failed");
    expect(s.conditions[0]).toMatchObject({ reason: "TooManyFailed" });
    expect(counts(s)).toMatchObject({ updatedReplicas: 1, failedReplicas: 2, updatingReplicas: 0 });
    // Resume retries the failed ones with their next attempt, then carries on.
    s = step(s, { type: "resume" });
    expect(s.phase).toBe("Updating");
    expect(inFlight(s).map((m) => [m.id, m.attempt])).toEqual([["s000", 2], ["s002", 2]]);
    while (s.phase === "Updating") s = outcome(s, "succeeded");
    expect(s.phase).toBe("Completed");
    expect(counts(s).updatedReplicas).toBe(5);
  });

  it("a run that ends with failures is Failed, and says how many", () => {
    let s = run({ selector: {}, updateStrategy: { maxUnavailable: 3 } }, sandboxes(2));
    s = step(s, { type: "progress", outcomes: { s000: { status: "failed" }, s001: { status: "succeeded" } } });
    expect(s.phase).toBe("Failed");
    expect(s.conditions[0]).toMatchObject({ reason: "SandboxesFailed", message: "1 upgraded, 1 failed" });
  });

  it("paused starts nothing new; those under way finish; unpausing carries on", () => {
    let s = run({ selector: {}, updateStrategy: { maxUnavailable: 2 } }, sandboxes(4));
    s = step(s, { type: "change", paused: true });
    s = outcome(s, "succeeded");
    expect(updating(s)).toEqual([]);
    expect(s.phase).toBe("Updating");
    expect(s.conditions[0]).toMatchObject({ reason: "Paused" });
    s = step(s, { type: "change", paused: false });
    expect(updating(s)).toEqual(["s002", "s003"]);
  });

  it("a deleted sandbox leaves the run; nothing selected completes at once", () => {
    let s = run({ selector: {} }, sandboxes(2));
    s = outcome(s, "gone");
    expect(s.members.map((m) => m.id)).toEqual(["s001"]);
    expect(updating(s)).toEqual(["s001"]);
    expect(run({ selector: { matchLabels: { app: "none" } } }, sandboxes(3)).phase).toBe("Completed");
  });

  it("leaves alone the sandboxes of a cluster whose driver cannot recreate, and says so", () => {
    const c = [...sandboxes(2), ...sandboxes(1, { id: "k1", cluster: "kube" })];
    const s = transition(initialState("ops", "team", UpdateOpsSpec.parse({ selector: {} }), NOW), { type: "select", candidates: c, targets: { t: "r2" }, unsupported: { kube: "no recreate" } }, NOW);
    expect(s.members.map((m) => m.id)).toEqual(["s000", "s001"]);
    expect(s.events.find((e) => e.reason === "RecreateNotSupported")).toMatchObject({ type: "Warning", message: expect.stringContaining("1 selected sandboxes on cluster \"kube\"") });
  });

  it("CheckpointRestore: a member's checkpoint is due before its upgrade, once per attempt; a failed one fails that member only; the line says memory is not restored", () => {
    let s = run({ selector: {}, updateStrategy: { type: "CheckpointRestore", maxUnavailable: 2 } }, sandboxes(3));
    expect(s.phase).toBe("Updating");
    const [a, b] = inFlight(s);
    expect(checkpointDue(s, a!)).toBe(true);
    s = step(s, { type: "checkpointed", id: a!.id, attempt: 1, snapshotId: "snap-a" });
    s = step(s, { type: "checkpointed", id: a!.id, attempt: 1, snapshotId: "snap-again" });
    s = step(s, { type: "checkpointed", id: b!.id, attempt: 1, error: "the driver cannot take snapshots" });
    const m = (id: string) => s.members.find((x) => x.id === id)!;
    expect(checkpointDue(s, m(a!.id))).toBe(false);
    expect(m(a!.id).checkpoint).toEqual({ attempt: 1, snapshotId: "snap-a" });
    expect(m(b!.id)).toMatchObject({ status: "Failed", message: "checkpoint failed: the driver cannot take snapshots" });
    expect(s.events.filter((e) => e.reason === "CheckpointTaken").map((e) => e.sandboxId)).toEqual([a!.id]);
    expect(s.conditions[0]).toMatchObject({ reason: "Updating", message: expect.stringContaining("memory not restored") });
    s = step(s, { type: "progress", outcomes: { [a!.id]: { status: "succeeded" } } });
    expect(m(a!.id)).toMatchObject({ status: "Succeeded", message: restoredMessage("snap-a") });
    // Restored, its snapshot is the run's to delete; once freed it is held no more.
    expect(s.freeing).toEqual([{ snapshotId: "snap-a", sandboxId: a!.id }]);
    expect(active(s)).toBe(true);
    s = step(s, { type: "freed", snapshotIds: ["snap-a"] });
    expect(s.freeing).toEqual([]);
    expect(heldSnapshots(s)).toEqual([]);
    expect(s.events.find((e) => e.reason === "CheckpointDeleted")).toMatchObject({ sandboxId: a!.id });
    // Resume retries the failed one with a checkpoint due again for its next attempt.
    const c = inFlight(s).find((x) => x.id !== b!.id)!;
    s = step(s, { type: "checkpointed", id: c.id, attempt: 1, snapshotId: "snap-c" });
    s = step(s, { type: "progress", outcomes: { [c.id]: { status: "succeeded" } } });
    expect(s.phase).toBe("Failed");
    s = step(s, { type: "resume" });
    expect(s.phase).toBe("Updating");
    expect(m(b!.id)).toMatchObject({ status: "Updating", attempt: 2 });
    expect(checkpointDue(s, m(b!.id))).toBe(true);
    // A member that fails after its checkpoint keeps it (its recovery point, held by the run)
    // until its retry's checkpoint replaces it, which frees the old one.
    s = step(s, { type: "checkpointed", id: b!.id, attempt: 2, snapshotId: "snap-b2" });
    // Mid-upgrade, its snapshot is what the upgrade restores from: deleting the run keeps it.
    expect(heldSnapshots(s)).toContain("snap-b2");
    expect(snapshotsFreedOnDelete(s)).not.toContain("snap-b2");
    s = step(s, { type: "progress", outcomes: { [b!.id]: { status: "failed", message: "holder died" } } });
    expect(m(b!.id).message).toContain("checkpoint snapshot snap-b2 kept");
    expect(heldSnapshots(s)).toContain("snap-b2");
    expect(snapshotsFreedOnDelete(s)).toContain("snap-b2");
    s = step(s, { type: "resume" });
    s = step(s, { type: "checkpointed", id: b!.id, attempt: 3, snapshotId: "snap-b3" });
    expect(s.freeing?.map((f) => f.snapshotId)).toContain("snap-b2");
    expect(m(b!.id).checkpoint).toEqual({ attempt: 3, snapshotId: "snap-b3" });
  });

  it("CheckpointRestore: a paused member restored only when it resumes counts upgraded; its snapshot is not the run's to free (kept until the restore)", () => {
    let s = run({ selector: {}, stateFilter: { states: ["Paused"] }, updateStrategy: { type: "CheckpointRestore", maxUnavailable: 1 } }, sandboxes(1, { phase: "Paused" }));
    const [a] = inFlight(s);
    s = step(s, { type: "checkpointed", id: a!.id, attempt: 1, snapshotId: "snap-a" });
    s = step(s, { type: "progress", outcomes: { [a!.id]: { status: "succeeded", restorePending: true } } });
    expect(s.phase).toBe("Completed");
    expect(s.members[0]).toMatchObject({ status: "Succeeded", message: restoredMessage("snap-a", true) });
    expect(s.freeing ?? []).toEqual([]);
    expect(heldSnapshots(s)).toEqual([]);
    expect(active(s)).toBe(false);
    expect(s.events.find((e) => e.reason === "CheckpointKept")).toMatchObject({ sandboxId: a!.id, message: expect.stringContaining("snap-a") });
  });

  it("CheckpointRestore: a snapshot whose delete keeps failing is retried later, backing off, then given up on with a Warning, so the run goes idle", () => {
    let s = run({ selector: {}, updateStrategy: { type: "CheckpointRestore", maxUnavailable: 1 } }, sandboxes(1));
    const [a] = inFlight(s);
    s = step(s, { type: "checkpointed", id: a!.id, attempt: 1, snapshotId: "snap-a" });
    s = step(s, { type: "progress", outcomes: { [a!.id]: { status: "succeeded" } } });
    expect(s.phase).toBe("Completed");
    expect(freeDue(s, NOW + 1).map((f) => f.snapshotId)).toEqual(["snap-a"]);
    let t = NOW + 1;
    let waits = 0;
    for (let i = 1; i < MAX_FREE_ATTEMPTS; i++) {
      s = transition(s, { type: "freeFailed", snapshotId: "snap-a", error: "store down" }, t);
      expect(active(s)).toBe(true);
      // Not due again at once: the next try waits, longer each time.
      expect(freeDue(s, t)).toEqual([]);
      const wait = nextFreeAt(s)! - t;
      expect(wait).toBeGreaterThan(waits);
      waits = wait;
      t = nextFreeAt(s)!;
      expect(freeDue(s, t).map((f) => f.snapshotId)).toEqual(["snap-a"]);
    }
    s = transition(s, { type: "freeFailed", snapshotId: "snap-a", error: "store down" }, t);
    expect(s.freeing).toEqual([]);
    expect(active(s)).toBe(false);
    expect(s.events.at(-1)).toMatchObject({ type: "Warning", reason: "CheckpointLeft", sandboxId: a!.id, message: expect.stringContaining("snap-a") });
  });

  it("a failing upgrade hook fails that sandbox, not the run; a passed hook is not due again in that attempt, but is after a retry", () => {
    let s = run({ selector: {}, updateStrategy: { maxUnavailable: 2 } }, sandboxes(3));
    const [a, b] = inFlight(s);
    expect(hookDue(a!, "pre")).toBe(true);
    s = step(s, { type: "hooked", id: a!.id, attempt: 1, stage: "pre", proceed: true, reason: "Succeeded", message: "exit code 0" });
    s = step(s, { type: "hooked", id: b!.id, attempt: 1, stage: "pre", proceed: false, reason: "Failed", message: "exit code 3: busy" });
    const m = (id: string) => s.members.find((x) => x.id === id)!;
    expect(hookDue(m(a!.id), "pre")).toBe(false);
    expect(hookDue(m(a!.id), "post")).toBe(true);
    expect(m(b!.id)).toMatchObject({ status: "Failed", message: "preUpgrade hook failed: exit code 3: busy" });
    expect(s.events.filter((e) => e.reason === "PreUpgradeHook").map((e) => [e.sandboxId, e.type])).toEqual([[a!.id, "Normal"], [b!.id, "Warning"]]);
    // The budget of 2 holds the failed one; the run goes on with the others.
    expect(s.phase).toBe("Updating");
    expect(updating(s)).toEqual([a!.id]);
    // A hook answer of an older attempt is ignored; no hook at all is noted without an event.
    s = step(s, { type: "hooked", id: a!.id, attempt: 0, stage: "post", proceed: false, reason: "Failed", message: "late" });
    expect(m(a!.id).status).toBe("Updating");
    const events = s.events.length;
    s = step(s, { type: "hooked", id: a!.id, attempt: 1, stage: "post", proceed: true, reason: "None", message: "no hook", none: true });
    expect(s.events.length).toBe(events);
    expect(hookDue(m(a!.id), "post")).toBe(false);
    // Resumed, the failed one's next attempt runs its hook again.
    s = step(s, { type: "resume" });
    expect(hookDue(m(b!.id), "pre")).toBe(true);
  });
  it("Recreate of a member whose earlier CheckpointRestore restore is still pending: it counts upgraded, holds no snapshot of its own, and its line says the pending restore is carried forward", () => {
    let s = run({ selector: {}, stateFilter: { states: ["Paused"] }, updateStrategy: { type: "Recreate", maxUnavailable: 1 } }, sandboxes(1, { phase: "Paused" }));
    const [a] = inFlight(s);
    s = step(s, { type: "progress", outcomes: { [a!.id]: { status: "succeeded", restorePending: true, restoreFs: "snap-old" } } });
    expect(s.phase).toBe("Completed");
    expect(s.members[0]).toMatchObject({ status: "Succeeded", message: expect.stringContaining("pending restore of checkpoint snapshot snap-old is carried forward") });
    expect(heldSnapshots(s)).toEqual([]);
  });

  it("newEvents: the events a step added, also when the run before it is a copy (stored and loaded, cloned), and past the bound", () => {
    const selected = run({ selector: {}, updateStrategy: { maxUnavailable: 2 } }, sandboxes(3));
    const first = newEvents(undefined, selected).map((e) => `${e.reason}/${e.sandboxId ?? ""}`);
    expect(first.length).toBeGreaterThan(0);
    const next = outcome(selected, "succeeded");
    const added = newEvents(selected, next).map((e) => `${e.reason}/${e.sandboxId ?? ""}`);
    expect(added).toEqual(expect.arrayContaining(["UpgradeSucceeded/s000", "UpgradeSucceeded/s001", "UpgradeStarted/s002"]));
    // The same step seen from a deep copy of the run before it (a run loaded back from storage):
    // nothing it already had counts as new.
    expect(newEvents(structuredClone(selected), next)).toEqual(newEvents(selected, next));
    expect(newEvents(structuredClone(next), structuredClone(next))).toEqual([]);
    // A run whose event list is full: the oldest dropped, the new ones still found.
    let full = run({ selector: {}, updateStrategy: { maxUnavailable: 10 } }, sandboxes(150));
    while (full.events.length < MAX_EVENTS) full = outcome(full, "succeeded");
    const after = outcome(full, "succeeded");
    expect(after.events.length).toBe(MAX_EVENTS);
    const tail = newEvents(structuredClone(full), after);
    expect(tail.length).toBeGreaterThan(0);
    expect(tail).toEqual(after.events.slice(-tail.length));
    expect(tail.filter((e) => e.reason === "UpgradeSucceeded").map((e) => e.sandboxId)).toEqual(updating(full));
  });

  it("a member another run holds (its upgrade of it under way) is Skipped, its line naming that run; its checkpoint freed; not asked again; the run completes", () => {
    let s = run({ selector: {}, updateStrategy: { type: "CheckpointRestore", maxUnavailable: 2 } }, sandboxes(2));
    for (const m of inFlight(s)) s = step(s, { type: "checkpointed", id: m.id, attempt: 1, snapshotId: `snap-${m.id}` });
    const held = 'left alone: SandboxUpdateOps "other" holds it (its upgrade to revision r9 is under way)';
    s = step(s, { type: "progress", outcomes: { s000: { status: "held", message: held }, s001: { status: "succeeded" } } });
    expect(s.members[0]).toMatchObject({ id: "s000", status: "Skipped", message: held });
    expect(s.members[0]!.checkpoint).toBeUndefined();
    expect(freeDue(s, NOW + 1).map((f) => f.snapshotId)).toContain("snap-s000");
    expect(updating(s)).toEqual([]);
    expect(s.events).toContainEqual(expect.objectContaining({ reason: "SandboxHeld", type: "Warning", sandboxId: "s000", message: held }));
    expect(s.phase).toBe("Completed");
    expect(s.conditions[0]!.message).toBe("1 upgraded, 0 failed, 1 skipped (held by another run)");
    expect(counts(s)).toMatchObject({ replicas: 2, updatedReplicas: 1, failedReplicas: 0, updatingReplicas: 0 });
  });

  it("a candidate another run is upgrading is Skipped at selection, before any hook or checkpoint of this run; its own earlier upgrade does not hold it", () => {
    const c = sandboxes(3);
    c[0] = { ...c[0]!, upgradingBy: "other" };
    c[1] = { ...c[1]!, upgradingBy: "ops" }; // this run's own upgrade does not hold it against itself
    const s = run({ selector: {}, updateStrategy: { type: "CheckpointRestore", maxUnavailable: 3 } }, c);
    expect(s.members.map((m) => [m.id, m.status])).toEqual([["s000", "Skipped"], ["s001", "Updating"], ["s002", "Updating"]]);
    expect(s.members[0]!.message).toBe('left alone: SandboxUpdateOps "other" holds it (its upgrade of it is under way)');
    // Never in flight, so the shell runs no hook, takes no checkpoint and sends no upgrade for it.
    expect(updating(s)).toEqual(["s001", "s002"]);
    expect(s.members[0]!.attempt).toBe(0);
    expect(s.events).toContainEqual(expect.objectContaining({ reason: "SandboxHeld", sandboxId: "s000" }));
  });
});
