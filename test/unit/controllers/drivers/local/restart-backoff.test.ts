import { describe, expect, it } from "vitest";
import { RESTART_MAX_MS, RESTART_RESET_MS, restarting, restartWait, started } from "../../../../../controllers/drivers/local/restart-backoff.ts";
import type { SandboxObservation } from "../../../../../controllers/drivers/driver.ts";

/** A pid 1 killed `up` ms after each start, `n` times: the waits before each restart. */
function waits(n: number, up: number): number[] {
  let s = started(undefined, 0);
  let now = 0;
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    now += up;
    let r = restartWait(s, now);
    out.push(r.wait);
    if (r.wait) r = restartWait(r.next, (now += r.wait));
    expect(r.wait).toBe(0);
    s = started(r.next, now);
  }
  return out;
}

describe("restarts of a sandbox whose pid 1 ended", () => {
  it("the first is prompt; killed again soon after each restart, it waits 1 s, doubling up to 60 s", () => {
    expect(waits(9, 100)).toEqual([0, 1000, 2000, 4000, 8000, 16000, 32000, RESTART_MAX_MS, RESTART_MAX_MS]);
  });

  it("up longer than the quick bound: no wait; up for ten minutes: the backoff starts over", () => {
    expect(waits(3, 20_000)).toEqual([0, 0, 0]);
    let s = started(undefined, 0);
    for (let i = 0, now = 0; i < 4; i++) {
      let r = restartWait(s, (now += 100));
      if (r.wait) r = restartWait(r.next, (now += r.wait));
      s = started(r.next, now);
    }
    expect(s.delay).toBe(4000);
    const later = restartWait(s, s.startedAt + RESTART_RESET_MS);
    expect(later.wait).toBe(0);
    expect(restartWait(started(later.next, later.next.startedAt), later.next.startedAt + 100).wait).toBe(1000);
  });

  it("quick means soon after a restart: a sandbox restarted once long ago, then resumed (a start that is no restart), is restarted at once when its pid 1 ends soon after the resume", () => {
    const DAY = 86_400_000;
    const first = restartWait(started(undefined, 0), 100);
    expect(first.wait).toBe(0);
    const resumed = started(started(first.next, 100), DAY);
    expect(restartWait(resumed, DAY + 100).wait).toBe(0);
    // A Stop pause's resume soon after a restart is no restart either.
    const soon = started(started(first.next, 100), 5000);
    expect(restartWait(soon, 5100).wait).toBe(0);
    // The restart that follows is one: ended soon after it, it waits.
    const again = restartWait(soon, 5100);
    expect(restartWait(started(again.next, 5100), 5200).wait).toBe(1000);
  });

  it("asked again while it waits: the rest of the wait, no new backoff step", () => {
    const s = { ...started(undefined, 0), count: 1, afterRestart: true };
    const first = restartWait(s, 100);
    expect(first.wait).toBe(1000);
    expect(restartWait(first.next, 600)).toMatchObject({ wait: 500, next: first.next });
    expect(restartWait(first.next, 1100)).toMatchObject({ wait: 0, next: { count: 2, startedAt: 1100 } });
  });

  it("until it runs again it reports Pending with a Ready condition False, reason Pid1Restarting (what the edge shows and its gateway holds requests on), its own conditions kept", () => {
    const enforced = { cpu: true, memory: true, pids: true, network: true };
    const failed: SandboxObservation = { id: "x", generation: 3, phase: "Failed", level: "bwrap+cgroup", createdAt: "2026-01-01T00:00:00.000Z", enforced, message: "the sandbox's holder process is gone", conditions: [{ type: "SeccompFiltered", status: "False", reason: "UnfilteredHolder" }] };
    const ready = { type: "Ready", status: "False", reason: "Pid1Restarting", message: "restarting" };
    expect(restarting(failed, "restarting", 2000)).toEqual({ ...failed, phase: "Pending", message: "restarting", retryAfterMs: 2000, conditions: [ready, ...failed.conditions!] });
    const { conditions: _c, ...bare } = failed;
    expect(restarting(bare, "restarting")).toEqual({ ...bare, phase: "Pending", message: "restarting", conditions: [ready] });
  });
});
