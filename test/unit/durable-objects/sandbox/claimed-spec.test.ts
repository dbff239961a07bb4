// The two halves of a create's spec (sandbox/claimed-spec.ts): what the route drafts before the
// claim, and what the claim decides.
import { describe, expect, it } from "vitest";
import { claimedSpec, type SpecDraft } from "../../../../durable-objects/sandbox/claimed-spec.ts";
import type { Claimed } from "../../../../durable-objects/pool/rpc.ts";

const draft = {
  teamId: "t1",
  templateId: "base",
  envVars: { A: "create", ONLY_CREATE: "1" },
  cpuCount: 2,
  memoryMB: 512,
  envdAccessToken: "tok",
} as unknown as SpecDraft;

const claimed = {
  ok: true,
  sandboxId: "abc123",
  cluster: "east",
  revision: "r1",
  warm: true,
  state: "available",
  generation: 4,
  endpoint: null,
  template: { image: "base" },
  pauseStrategy: "Freeze",
  envVars: { A: "template", ONLY_TEMPLATE: "1" },
} as unknown as Claimed;

describe("claimedSpec", () => {
  it("takes id, cluster, template and pause strategy from the claim, keeps the draft, and lets the create's env vars override the template's", () => {
    const spec = claimedSpec(draft, claimed);
    expect(spec).toMatchObject({ id: "abc123", cluster: "east", template: { image: "base" }, pauseStrategy: "Freeze", teamId: "t1", templateId: "base", cpuCount: 2, envdAccessToken: "tok" });
    expect(spec.envVars).toEqual({ A: "create", ONLY_CREATE: "1", ONLY_TEMPLATE: "1" });
    // Neither input is changed (the draft is reused when a create is tried again).
    expect(draft.envVars).toEqual({ A: "create", ONLY_CREATE: "1" });
  });
});
