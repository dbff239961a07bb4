// kubectl edits of a Sandbox's auto-pause policy as requests to the edge (pure, no cluster): a
// policy is reported once per change; removing it, or changing it to one the edge cannot run,
// reports none (the edge stops its probe), the latter with a Warning Event; a Sandbox that never
// had one reports nothing.
import { describe, expect, it } from "vitest";
import { UserRequests } from "../../../../../controllers/drivers/kubernetes/user-requests.ts";
import type { SandboxObject, SandboxRequest } from "../../../../../controllers/drivers/kubernetes/objects.ts";
import { ANNOTATION, LABEL } from "../../../../../schema/crd/labels.ts";

const probes = [{ name: "a", exec: { command: ["cat", "/tmp/x"] } }];
const idle = (probe: string) => ({ pause: { whenProbedIdleState: { probe, messageRegex: "^idle$", thresholdDuration: "30s" } } });
const sbx = (spec: object): SandboxObject => ({ metadata: { name: "s", namespace: "t", annotations: { [ANNOTATION.sandboxId]: "id1", [ANNOTATION.generation]: "3" } }, spec }) as unknown as SandboxObject;

describe("UserRequests auto-pause", () => {
  it("reports a policy once, none when it is removed or cannot be run (with a Warning), nothing for a Sandbox that never had one", () => {
    const sent: SandboxRequest[] = [];
    const warned: string[] = [];
    const r = new UserRequests((q) => sent.push(q), () => {}, (_ns, _o, reason, message) => warned.push(`${reason}: ${message}`));
    r.seen(sbx({ probes }), "t");
    expect(sent).toEqual([]);
    r.seen(sbx({ probes, autoPausePolicy: idle("a") }), "t");
    r.seen(sbx({ probes, autoPausePolicy: idle("a") }), "t");
    expect(sent).toEqual([{ sandboxId: "id1", namespace: "t", action: "autoPause", generation: 3, autoPausePolicy: expect.objectContaining({ messageRegex: "^idle$" }) }]);
    r.seen(sbx({ probes }), "t");
    expect(sent.slice(1)).toEqual([{ sandboxId: "id1", namespace: "t", action: "autoPause", generation: 3 }]);
    r.seen(sbx({ probes }), "t");
    expect(sent).toHaveLength(2);

    r.seen(sbx({ probes, autoPausePolicy: idle("a") }), "t");
    r.seen(sbx({ probes, autoPausePolicy: idle("missing") }), "t");
    expect(sent.slice(2)).toEqual([expect.objectContaining({ autoPausePolicy: expect.any(Object) }), { sandboxId: "id1", namespace: "t", action: "autoPause", generation: 3 }]);
    expect(warned).toEqual([expect.stringContaining('AutoPausePolicyNotApplied: auto-pause policy not applied: autoPausePolicy names probe "missing"')]);
    // Still unmappable: said once; removed after that: nothing runs, nothing to stop.
    r.seen(sbx({ probes, autoPausePolicy: idle("missing") }), "t");
    r.seen(sbx({ probes }), "t");
    expect(sent).toHaveLength(4);
    expect(warned).toHaveLength(1);
  });
});

describe("UserRequests lifecycle", () => {
  it("reports the Sandbox's hooks once per change and {} when removed; unusable ones are a Warning and send nothing", () => {
    const sent: SandboxRequest[] = [];
    const warned: string[] = [];
    const r = new UserRequests((q) => sent.push(q), () => {}, (_ns, _o, reason, message) => warned.push(`${reason}: ${message}`));
    const prePause = { exec: { command: ["sh", "-c", "exit 3"] }, timeoutSeconds: 5 };
    r.seen(sbx({}), "t");
    expect(sent).toEqual([]);
    r.seen(sbx({ lifecycle: { prePause } }), "t");
    r.seen(sbx({ lifecycle: { prePause } }), "t");
    expect(sent).toEqual([{ sandboxId: "id1", namespace: "t", action: "lifecycle", generation: 3, lifecycle: { prePause: { ...prePause, failurePolicy: "Fail" } } }]);
    r.seen(sbx({ lifecycle: { prePause: { timeoutSeconds: 5 } } }), "t");
    expect(sent).toHaveLength(1);
    expect(warned).toEqual([expect.stringContaining("LifecycleNotApplied: lifecycle not applied: prePause: a hook has exactly one of exec and http")]);
    r.seen(sbx({}), "t");
    expect(sent.slice(1)).toEqual([{ sandboxId: "id1", namespace: "t", action: "lifecycle", generation: 3, lifecycle: {} }]);
  });
});

describe("UserRequests after an agent restart", () => {
  it("the first look at a claimed Sandbox made before the agent started reports no policy and no hooks as a resync (removed while it was down?); a newer one, a warm member, or a second look reports nothing", () => {
    const sent: SandboxRequest[] = [];
    const started = Date.parse("2026-01-01T00:00:10Z");
    const r = new UserRequests((q) => sent.push(q), () => {}, () => {}, () => undefined, started);
    const made = (id: string, at: string, labels: Record<string, string> = {}, spec: object = {}) =>
      ({ metadata: { name: id, creationTimestamp: at, labels, annotations: { [ANNOTATION.sandboxId]: id, [ANNOTATION.generation]: "1" } }, spec }) as unknown as SandboxObject;
    r.seen(made("old", "2026-01-01T00:00:00Z", { [LABEL.claimed]: "true" }), "t");
    r.seen(made("old", "2026-01-01T00:00:00Z", { [LABEL.claimed]: "true" }), "t");
    r.seen(made("new", "2026-01-01T00:00:20Z"), "t");
    r.seen(made("warm", "2026-01-01T00:00:00Z", { [LABEL.claimed]: "false" }), "t");
    expect(sent).toEqual([
      { sandboxId: "old", namespace: "t", action: "autoPause", generation: 1, resync: true },
      { sandboxId: "old", namespace: "t", action: "lifecycle", generation: 1, lifecycle: {}, resync: true },
    ]);
    // An older one that has a policy and hooks reports them as they are (not as a resync).
    r.seen(made("kept", "2026-01-01T00:00:00Z", {}, { probes, autoPausePolicy: idle("a"), lifecycle: { prePause: { exec: { command: ["true"] } } } }), "t");
    expect(sent.slice(2).map((q) => [q.action, q.resync])).toEqual([["autoPause", undefined], ["lifecycle", undefined]]);
  });
});

describe("UserRequests of a Sandbox in another namespace", () => {
  it("a Sandbox naming a sandbox the agent placed elsewhere is ignored with one Warning; before the intent is known it goes with its namespace", () => {
    const sent: SandboxRequest[] = [];
    const warned: string[] = [];
    let placed: string | undefined;
    const r = new UserRequests((q) => sent.push(q), () => {}, (ns, _o, reason) => warned.push(`${ns} ${reason}`), () => placed);
    const forged = { ...sbx({ paused: true, lifecycle: { prePause: { exec: { command: ["id"] } } } }) };
    forged.metadata!.annotations![ANNOTATION.desiredPaused] = "false";
    expect(r.seen(forged, "other")).toBe(true);
    expect(sent.map((q) => [q.namespace, q.action])).toEqual([["other", "lifecycle"], ["other", "pause"]]);
    placed = "t";
    sent.length = 0;
    expect(r.seen(forged, "other")).toBe(false);
    expect(r.seen({ ...forged, spec: { paused: false } }, "other")).toBe(false);
    expect(sent).toEqual([]);
    expect(warned).toEqual(["other ForeignSandboxId"]);
  });
});
