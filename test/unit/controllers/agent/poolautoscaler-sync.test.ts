// The PoolAutoscaler CRD ↔ edge mapping (pure): the spec the edge's schema takes, the status the
// object shows (conditions keep their transition time), the refusal's condition, Event names.
import { describe, expect, it } from "vitest";
import { autoscalerSpecOf, eventName, refusedStatusOf, statusOf, type PoolAutoscalerObject } from "../../../../controllers/agent/kube-sync/poolautoscaler-sync.ts";
import { AutoscalerSpec } from "../../../../schema/api/autoscaler.ts";
import type { AutoscalerStatusReply } from "../../../../schema/protocol/index.ts";

const pa = (spec: Partial<PoolAutoscalerObject["spec"]>): PoolAutoscalerObject => ({
  apiVersion: "agents.kruise.io/v1alpha1",
  kind: "PoolAutoscaler",
  metadata: { name: "pa", uid: "u1", generation: 1 },
  spec: { scaleTargetRef: { kind: "SandboxSet", name: "pool" }, maxReplicas: 5, ...spec },
});

const edge = (over: Partial<AutoscalerStatusReply> = {}): AutoscalerStatusReply => ({
  suspended: false,
  currentReplicas: 0,
  desiredReplicas: 2,
  lastScaleTime: "2026-12-01T10:00:00.000Z",
  currentCapacity: { available: 0 },
  appliedCronPolicies: [],
  lastDecision: { time: "2026-12-01T10:00:00.000Z", reason: "TooFewReplicas", message: "clamped to minReplicas 2", currentReplicas: 0, desiredReplicas: 2 },
  conditions: [{ type: "AbleToScale", status: "True", reason: "SucceededRescale", message: "" }],
  events: [],
  ...over,
});

describe("autoscalerSpecOf", () => {
  it("maps every CRD field the edge has, and the edge's schema takes it", () => {
    const spec = autoscalerSpecOf(
      pa({
        minReplicas: 1,
        cronPolicies: [{ name: "night", schedule: "* 22-23,0-5 * * *", timeZone: "Europe/Berlin", targetReplicas: 4 }],
        capacityPolicy: { targetAvailable: "20%", scaleDown: { stabilizationWindowSeconds: 60 } },
        suspend: true,
      }),
    );
    const parsed = AutoscalerSpec.parse(spec);
    expect(parsed).toMatchObject({
      minReplicas: 1,
      maxReplicas: 5,
      suspend: true,
      cronPolicies: [{ name: "night", schedule: "* 22-23,0-5 * * *", timeZone: "Europe/Berlin", targetReplicas: 4 }],
      capacityPolicy: { targetAvailable: "20%", tolerance: "10%", scaleUp: { stabilizationWindowSeconds: 0 }, scaleDown: { stabilizationWindowSeconds: 60 } },
    });
    // Upstream's controller flags, not in the CRD: the edge's defaults.
    expect(parsed.sampling).toEqual({ intervalSeconds: 5, windowSeconds: 30 });
  });

  it("leaves minReplicas and the capacity policy to their defaults", () => {
    const parsed = AutoscalerSpec.parse(autoscalerSpecOf(pa({})));
    expect(parsed).toMatchObject({ minReplicas: 0, maxReplicas: 5, cronPolicies: [], suspend: false });
    expect(parsed.capacityPolicy).toBeUndefined();
  });
});

describe("statusOf", () => {
  it("copies the edge's status and keeps a condition's transition time while its status holds", () => {
    const first = statusOf(undefined, 1, edge(), "2026-12-01T10:00:01.000Z");
    expect(first).toMatchObject({ observedGeneration: 1, desiredReplicas: 2, lastDecision: { reason: "TooFewReplicas" } });
    expect(first.conditions).toEqual([{ type: "AbleToScale", status: "True", reason: "SucceededRescale", message: "", observedGeneration: 1, lastTransitionTime: "2026-12-01T10:00:01.000Z" }]);
    const later = statusOf(first, 2, edge(), "2026-12-01T10:05:00.000Z");
    expect(later.conditions![0]!.lastTransitionTime).toBe("2026-12-01T10:00:01.000Z");
    expect(later.conditions![0]!.observedGeneration).toBe(2);
  });

  it("leaves out what the edge has not decided yet (a merge patch would drop a null)", () => {
    const st = statusOf(undefined, 1, edge({ lastScaleTime: null, lastDecision: null }), "2026-12-01T10:00:00.000Z");
    expect("lastScaleTime" in st).toBe(false);
    expect("lastDecision" in st).toBe(false);
  });
});

describe("refusedStatusOf", () => {
  it("a missing target is FailedGetTarget, any other refusal FailedScale", () => {
    const now = "2026-12-01T10:00:00.000Z";
    expect(refusedStatusOf(undefined, 1, { code: "template_not_found", message: 'Template "x" not found' }, now).conditions).toEqual([
      { type: "AbleToScale", status: "False", reason: "FailedGetTarget", message: 'Template "x" not found', observedGeneration: 1, lastTransitionTime: now },
    ]);
    expect(refusedStatusOf(undefined, 1, { code: "bad_request", message: "no" }, now).conditions![0]!.reason).toBe("FailedScale");
  });
});

describe("eventName", () => {
  it("is the same for the same scale and differs between scales (a DNS subdomain)", () => {
    const a = eventName("pa", { time: "2026-12-01T10:00:00.000Z", reason: "SuccessfulRescale" });
    expect(a).toBe(eventName("pa", { time: "2026-12-01T10:00:00.000Z", reason: "SuccessfulRescale" }));
    expect(a).not.toBe(eventName("pa", { time: "2026-12-01T10:00:00.001Z", reason: "SuccessfulRescale" }));
    expect(a).not.toBe(eventName("pa", { time: "2026-12-01T10:00:00.000Z", reason: "CronPolicyActive" }));
    expect(a).toMatch(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/);
  });
});
