// The edge↔agent frames: what parses, what is refused, and that parsing never throws.
import { describe, expect, it } from "vitest";
import { AgentMessageSchema, EdgeMessageSchema, IntentSchema, newSandboxId, parseFrame, SandboxIdSchema } from "../../../../schema/protocol/index.ts";

const intent = { sandboxId: "abc123", generation: 1, owner: { kind: "pool", id: "t/base" }, desired: { state: "running" }, template: { id: "base", revision: "r1" }, issuedAt: 1 };

describe("protocol frames", () => {
  it("fills an intent's defaults (pause strategy, user, workdir, resources, token)", () => {
    expect(IntentSchema.parse(intent)).toMatchObject({
      desired: { state: "running", pauseStrategy: "Freeze" },
      template: { user: "user", workdir: "/home/user", image: "base", resources: { cpuCount: 1, memoryMB: 512 } },
      envVars: {},
      envdAccessToken: null,
      allowInternetAccess: true,
    });
  });

  it("requires a template unless the intent deletes", () => {
    expect(IntentSchema.safeParse({ ...intent, template: null }).success).toBe(false);
    expect(IntentSchema.safeParse({ ...intent, template: null, desired: { state: "deleted" } }).success).toBe(true);
  });

  it("parses an agent hello with its inventory and an edge intents batch", () => {
    const hello = parseFrame(AgentMessageSchema, JSON.stringify({ type: "hello", protocol: 1, agentId: "a", driver: "local", ingress: { url: "http://x" }, inventory: [{ sandboxId: "abc123", generation: 2, phase: "Paused", ready: false, observedAt: 5 }] }));
    expect(hello).toMatchObject({ ok: true, value: { type: "hello", inventory: [{ phase: "Paused", endpoint: null }] } });
    const batch = parseFrame(EdgeMessageSchema, JSON.stringify({ type: "intents", items: [{ seq: 3, intent }] }));
    expect(batch).toMatchObject({ ok: true, value: { items: [{ seq: 3, intent: { sandboxId: "abc123" } }] } });
  });

  it("refuses garbage, unknown types and bad ids without throwing", () => {
    expect(parseFrame(AgentMessageSchema, "{nope")).toEqual({ ok: false, error: "frame is not JSON" });
    expect(parseFrame(AgentMessageSchema, JSON.stringify({ type: "shutdown" })).ok).toBe(false);
    expect(parseFrame(AgentMessageSchema, JSON.stringify({ type: "ack", items: [] })).ok).toBe(false);
    expect(SandboxIdSchema.safeParse("Has-Upper").success).toBe(false);
  });

  it("mints 20-character [a-z0-9] ids that do not repeat", () => {
    const ids = new Set(Array.from({ length: 10_000 }, () => newSandboxId()));
    expect(ids.size).toBe(10_000);
    for (const id of [...ids].slice(0, 100)) expect(id).toMatch(/^[a-z0-9]{20}$/);
  });
});
