// The agent link's frames are bounded (issue 10.8): every list, map and string a cluster object
// can fill has a limit consistent with schema/api/limits.ts, and the refusal names it.
import { describe, expect, it } from "vitest";
import { MAX_CRD_FRAME_ITEMS, MAX_ENV_VARS, MAX_METADATA_ENTRIES, MAX_MESSAGE_LENGTH, MAX_NAME_LENGTH } from "../../../schema/api/limits.ts";
import { AgentMessageSchema, parseFrame } from "../../../schema/protocol/index.ts";
import { MAX_TEMPLATES_PER_NAMESPACE } from "../../../schema/protocol/crd-sync.ts";

const many = (n: number, v = "x") => Object.fromEntries(Array.from({ length: n }, (_, i) => [`K${i}`, v]));
const claim = (extra: Record<string, unknown> = {}) => ({ type: "claims", items: [{ id: "c", namespace: "team", claim: { name: "c", uid: "u" }, templateName: "t", replicas: 1, ...extra }] });
const parse = (frame: unknown) => parseFrame(AgentMessageSchema, JSON.stringify(frame));
const error = (frame: unknown) => {
  const r = parse(frame);
  return r.ok ? "accepted" : r.error;
};

describe("CRD frame bounds", () => {
  it("a claim at the bounds parses; one past them is refused naming the limit", () => {
    expect(parse(claim({ envVars: many(MAX_ENV_VARS), labels: many(MAX_METADATA_ENTRIES), annotations: many(MAX_METADATA_ENTRIES) })).ok).toBe(true);
    expect(error(claim({ envVars: many(MAX_ENV_VARS + 1) }))).toContain(`at most ${MAX_ENV_VARS} env vars`);
    expect(error(claim({ labels: many(MAX_METADATA_ENTRIES + 1) }))).toContain(`at most ${MAX_METADATA_ENTRIES} labels`);
    expect(error(claim({ annotations: many(MAX_METADATA_ENTRIES + 1) }))).toContain(`at most ${MAX_METADATA_ENTRIES} annotations`);
    expect(error(claim({ envVars: { A: "v".repeat(32 * 1024 + 1) } }))).toContain("envVars");
    expect(error(claim({ claim: { name: "n".repeat(MAX_NAME_LENGTH + 1), uid: "u" } }))).toContain("claim.name");
    expect(error(claim({ replicas: 1001 }))).toContain("replicas");
  });

  it("items per frame, SandboxSet uids and inventories are bounded", () => {
    const req = (i: number) => ({ id: `r${i}`, sandboxId: "abc", namespace: "t", action: "kill", generation: 1 });
    expect(parse({ type: "requests", items: Array.from({ length: MAX_CRD_FRAME_ITEMS }, (_, i) => req(i)) }).ok).toBe(true);
    expect(error({ type: "requests", items: Array.from({ length: MAX_CRD_FRAME_ITEMS + 1 }, (_, i) => req(i)) })).toContain(`at most ${MAX_CRD_FRAME_ITEMS} items per frame`);
    // A SandboxSet item is one of three shapes (a union): zod names the item, not which bound.
    expect(error({ type: "sandboxsets", items: [{ id: "s", namespace: "team", name: "n", uid: "u".repeat(MAX_NAME_LENGTH), generation: 1, spec: {} }] })).toBe("accepted");
    expect(error({ type: "sandboxsets", items: [{ id: "s", namespace: "team", name: "n", uid: "u".repeat(MAX_NAME_LENGTH + 1), generation: 1, spec: {} }] })).toContain("items[0]");
    const present = (n: number) => Array.from({ length: n }, (_, i) => `t${i}`);
    expect(error({ type: "sandboxsets", items: [{ id: "s", namespace: "team", present: present(MAX_TEMPLATES_PER_NAMESPACE) }] })).toBe("accepted");
    expect(error({ type: "sandboxsets", items: [{ id: "s", namespace: "team", present: present(MAX_TEMPLATES_PER_NAMESPACE + 1) }] })).toContain("items[0]");
  });

  it("quota items take the admin API's limits: whole numbers ≥ 0, known names only", () => {
    expect(parse({ type: "quotas", items: [{ id: "q", namespace: "team", limits: { runningSandboxes: 10, memoryMB: 4096 } }] }).ok).toBe(true);
    expect(parse({ type: "quotas", items: [{ id: "q", namespace: "team", limits: {} }] }).ok).toBe(true);
    expect(error({ type: "quotas", items: [{ id: "q", namespace: "team", limits: { runningSandboxes: -1 } }] })).toContain("runningSandboxes");
    expect(error({ type: "quotas", items: [{ id: "q", namespace: "team", limits: { gpus: 1 } }] })).toContain("gpus");
  });

  it("hello strings and ack messages are bounded", () => {
    const hello = { type: "hello", protocol: 1, agentId: "a", driver: "local", ingress: { url: "http://127.0.0.1:1" }, inventory: [] };
    expect(parse(hello).ok).toBe(true);
    expect(error({ ...hello, agentId: "a".repeat(MAX_NAME_LENGTH + 1) })).toContain("agentId");
    const ack = (message: string) => ({ type: "ack", items: [{ seq: 1, sandboxId: "abc", generation: 1, result: "rejected", message }] });
    expect(parse(ack("m".repeat(MAX_MESSAGE_LENGTH))).ok).toBe(true);
    expect(error(ack("m".repeat(MAX_MESSAGE_LENGTH + 1)))).toContain("message");
  });
});
