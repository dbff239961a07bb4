// The team quota annotations of a Namespace → the admin API's limits (pure).
import { describe, expect, it } from "vitest";
import { quotaFromAnnotations } from "../../../../controllers/agent/kube-sync/namespace-quota.ts";

const P = "quota.agents.kruise.io";

describe("quotaFromAnnotations", () => {
  it("maps each annotation to its limit and ignores other annotations; none is {} (the defaults)", () => {
    expect(quotaFromAnnotations({ [`${P}/running-sandboxes`]: "10", [`${P}/vcpus`]: "40", [`${P}/memory-mb`]: "81920", [`${P}/creates-per-minute`]: " 5 ", "other/x": "y" })).toEqual({
      ok: true,
      limits: { runningSandboxes: 10, vcpus: 40, memoryMB: 81920, createsPerMinute: 5 },
    });
    expect(quotaFromAnnotations({ [`${P}/paused-sandboxes`]: "20", [`${P}/snapshots`]: "0" })).toEqual({ ok: true, limits: { pausedSandboxes: 20, snapshots: 0 } });
    expect(quotaFromAnnotations({ "kubernetes.io/metadata.name": "t" })).toEqual({ ok: true, limits: {} });
    expect(quotaFromAnnotations(undefined)).toEqual({ ok: true, limits: {} });
  });

  it("refuses values that are not whole numbers ≥ 0 within the admin API's bound, and unknown quota annotations, naming them", () => {
    for (const bad of ["-1", "1.5", "ten", "", "1e3", "99999999999"]) {
      const r = quotaFromAnnotations({ [`${P}/vcpus`]: bad });
      expect(r.ok).toBe(false);
      expect(!r.ok && r.message).toContain(`${P}/vcpus`);
    }
    const r = quotaFromAnnotations({ [`${P}/running-sandboxes`]: "10", [`${P}/gpus`]: "1" });
    expect(r.ok).toBe(false);
    expect(!r.ok && r.message).toContain(`unknown annotation ${P}/gpus`);
    // Within the digits but past the admin API's bound (1e9).
    expect(quotaFromAnnotations({ [`${P}/memory-mb`]: "2000000000" })).toMatchObject({ ok: false });
  });
});
