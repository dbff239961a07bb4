// The CRD-sync frames (schema/protocol/crd-sync.ts): SandboxSets, kubectl requests, claims and the
// edge's replies; and that the additions stay compatible with a peer that does not know them.
import { describe, expect, it } from "vitest";
import { AgentMessageSchema, EdgeMessageSchema, IntentSchema, parseFrame, WelcomeSchema } from "../../../../schema/protocol/index.ts";

const frame = (msg: unknown) => JSON.stringify(msg);

describe("CRD sync frames", () => {
  it("a SandboxSet upsert carries the edge's template spec with its defaults; a deletion needs only the object's identity", () => {
    const parsed = parseFrame(AgentMessageSchema, frame({ type: "sandboxsets", items: [{ id: "s0", namespace: "team-a", name: "python", uid: "u1", generation: 3, spec: { replicas: 2, image: "python:3.12" } }, { id: "s1", namespace: "team-a", name: "old", uid: "u0", deleted: true }] }));
    expect(parsed).toMatchObject({
      ok: true,
      value: { items: [{ generation: 3, spec: { replicas: 2, image: "python:3.12", cpuCount: 1, memoryMB: 512, pauseStrategy: "Freeze", updateStrategy: { maxUnavailable: "20%" } } }, { name: "old", deleted: true }] },
    });
  });

  it("refuses a SandboxSet whose namespace is not a team name or whose spec the edge would refuse", () => {
    const item = { id: "s0", namespace: "team-a", name: "python", uid: "u1", generation: 1, spec: {} };
    expect(parseFrame(AgentMessageSchema, frame({ type: "sandboxsets", items: [item] })).ok).toBe(true);
    expect(parseFrame(AgentMessageSchema, frame({ type: "sandboxsets", items: [{ ...item, namespace: "Team_A" }] })).ok).toBe(false);
    expect(parseFrame(AgentMessageSchema, frame({ type: "sandboxsets", items: [{ ...item, spec: { cpuCount: 0 } }] })).ok).toBe(false);
    expect(parseFrame(AgentMessageSchema, frame({ type: "sandboxsets", items: [{ ...item, spec: { replicas: 1, unknownField: 1 } }] })).ok).toBe(false);
    expect(parseFrame(AgentMessageSchema, frame({ type: "sandboxsets", items: [] })).ok).toBe(false);
  });

  it("a kubectl request names a sandbox, the Sandbox object's namespace, an action and the generation it was made at", () => {
    const ok = parseFrame(AgentMessageSchema, frame({ type: "requests", items: [{ id: "r0", sandboxId: "abc123", namespace: "team-a", action: "pause", generation: 4 }] }));
    expect(ok).toMatchObject({ ok: true, value: { items: [{ namespace: "team-a", action: "pause", generation: 4 }] } });
    expect(parseFrame(AgentMessageSchema, frame({ type: "requests", items: [{ id: "r0", sandboxId: "abc123", action: "pause", generation: 4 }] })).ok).toBe(false);
    expect(parseFrame(AgentMessageSchema, frame({ type: "requests", items: [{ id: "r0", sandboxId: "abc123", namespace: "team-a", action: "snapshot", generation: 4 }] })).ok).toBe(false);
    expect(parseFrame(AgentMessageSchema, frame({ type: "requests", items: [{ id: "r0", sandboxId: "ABC", namespace: "team-a", action: "kill", generation: 4 }] })).ok).toBe(false);
  });

  it("a claim defaults to createOnNoStock and empty maps, and needs 1..1000 replicas", () => {
    const claim = { id: "c0", namespace: "team-a", claim: { name: "batch", uid: "u" }, templateName: "python", replicas: 2 };
    expect(parseFrame(AgentMessageSchema, frame({ type: "claims", items: [claim] }))).toMatchObject({ ok: true, value: { items: [{ createOnNoStock: true, envVars: {}, labels: {}, annotations: {} }] } });
    expect(parseFrame(AgentMessageSchema, frame({ type: "claims", items: [{ ...claim, replicas: 0 }] })).ok).toBe(false);
    expect(parseFrame(AgentMessageSchema, frame({ type: "claims", items: [{ ...claim, timeoutS: -1 }] })).ok).toBe(false);
    expect(parseFrame(AgentMessageSchema, frame({ type: "claims", items: [{ ...claim, inplaceUpdate: { image: "python:3.13", cpuCount: 2 } }] }))).toMatchObject({ ok: true, value: { items: [{ inplaceUpdate: { image: "python:3.13", cpuCount: 2 } }] } });
    expect(parseFrame(AgentMessageSchema, frame({ type: "claims", items: [{ ...claim, inplaceUpdate: { cpuCount: 0 } }] })).ok).toBe(false);
  });

  it("the edge's replies correlate by id and carry a result, an error code and claimed ids", () => {
    const parsed = parseFrame(EdgeMessageSchema, frame({ type: "replies", items: [{ id: "c0", result: "rejected", code: "template_not_found", message: "no", sandboxIds: [] }, { id: "s0", result: "stale" }] }));
    expect(parsed).toMatchObject({ ok: true, value: { type: "replies", items: [{ code: "template_not_found" }, { result: "stale" }] } });
    expect(parseFrame(EdgeMessageSchema, frame({ type: "replies", items: [{ id: "c0", result: "maybe" }] })).ok).toBe(false);
  });
});

describe("compatibility with peers of the same protocol version", () => {
  it("a welcome from an edge without CRD sync has no features (the agent then sends none of them)", () => {
    const welcome = { type: "welcome", protocol: 1, cluster: "c", sessionId: "s", heartbeatIntervalMs: 15000, resync: { orphans: 0, recreated: 0, redelivered: 0 } };
    expect(WelcomeSchema.parse(welcome).features).toEqual([]);
    expect(WelcomeSchema.parse({ ...welcome, features: ["sandboxsets", "claims"] }).features).toEqual(["sandboxsets", "claims"]);
  });

  it("an intent without team (an older edge) means the driver's own namespace; with one it names the team", () => {
    const intent = { sandboxId: "abc123", generation: 1, owner: { kind: "sandbox" }, desired: { state: "running" }, template: { id: "base", revision: "r1" }, issuedAt: 1 };
    expect(IntentSchema.parse(intent).team).toBeNull();
    expect(IntentSchema.parse({ ...intent, team: "team-a" }).team).toBe("team-a");
    expect(IntentSchema.safeParse({ ...intent, team: "" }).success).toBe(false);
    expect(IntentSchema.parse(intent).inplaceUpdate).toBeUndefined();
    expect(IntentSchema.parse({ ...intent, inplaceUpdate: { image: "node:22" } }).inplaceUpdate).toEqual({ image: "node:22" });
  });
});
