// A Kubernetes sandbox whose CheckpointRestore restore is pending (its Sandbox's
// restore-pending-checkpoint-id mark): Stop-paused, it is reported in its paused phase with reason
// RestorePending, which the agent counts converged for a paused intent, so it is not requeued every
// 250 ms for as long as it rests paused; running, it is Pending (requeued) until a pod names the
// checkpoint. Pure: the driver's state mapping (pod-state.ts) and the reconciler's requeue rule.
import { describe, expect, it } from "vitest";
import { sandboxState, withPendingRestore } from "../../../../controllers/drivers/kubernetes/pod-state.ts";
import { isConverged, requeueFor } from "../../../../controllers/agent/reconciler.ts";
import type { Intent } from "../../../../schema/protocol/index.ts";

const intent = (state: "running" | "paused") => ({ desired: { state, pauseStrategy: "Stop" } }) as unknown as Intent;

describe("a pending restore on the kubernetes driver", () => {
  it("Stop-paused: reported paused with reason RestorePending, converged, not requeued", () => {
    const state = withPendingRestore(sandboxState({ paused: true, pauseStrategy: "Stop", frozen: false, pod: undefined }), true, "ckpt-1");
    expect(state).toMatchObject({ driverPhase: "Stopped", ready: false, reason: "RestorePending", message: expect.stringContaining("ckpt-1") });
    expect(isConverged(intent("paused"), state.driverPhase, state.ready)).toBe(true);
    expect(requeueFor(intent("paused"), state.driverPhase, state.ready)).toBeUndefined();
  });

  it("running: Pending and not ready until a pod names the checkpoint, so it is looked at again", () => {
    const state = withPendingRestore(sandboxState({ paused: false, pauseStrategy: "Stop", frozen: false, pod: undefined }), false, "ckpt-1");
    expect(state).toMatchObject({ driverPhase: "Pending", ready: false, reason: "RestorePending" });
    expect(requeueFor(intent("running"), state.driverPhase, state.ready)).toEqual({ requeueAfterMs: 250 });
  });

  it("without the mark nothing changes", () => {
    const plain = sandboxState({ paused: true, pauseStrategy: "Stop", frozen: false, pod: undefined });
    expect(withPendingRestore(plain, true, undefined)).toBe(plain);
  });
});
