// The team quota's pure ledger: limits, idempotent reserve/release ordered by generation, the
// creates-per-minute window, and what the reconcile drops.
import { describe, expect, it } from "vitest";
import { holds, Ledger, overMessage, RECONCILE_GRACE_MS, reheld, stale } from "../../../../durable-objects/quota/ledger.ts";
import { quotaDefaults, type QuotaLimits } from "../../../../schema/api/quota.ts";

const NONE: QuotaLimits = { runningSandboxes: null, vcpus: null, memoryMB: null, createsPerMinute: null, pausedSandboxes: null, snapshots: null };
const req = (key: string, generation = 1, extra: Partial<{ cpu: number; memoryMB: number; create: boolean; force: boolean; paused: "frozen" | "stopped" | "resuming" }> = {}) => ({
  key,
  generation,
  cpu: 1,
  memoryMB: 512,
  create: true,
  ...extra,
});

describe("quota ledger", () => {
  it("refuses the reserve that would pass a limit and names it", () => {
    const l = new Ledger();
    const limits = { ...NONE, runningSandboxes: 2 };
    expect(l.reserve(req("a"), limits, 0).ok).toBe(true);
    expect(l.reserve(req("b"), limits, 0).ok).toBe(true);
    const r = l.reserve(req("c"), limits, 0);
    expect(r).toEqual({ ok: false, over: { name: "runningSandboxes", used: 2, limit: 2 } });
    if (!r.ok) expect(overMessage("t", r.over)).toBe('team "t" has 2 of 2 running sandboxes (quota runningSandboxes)');
    expect(l.usage(0)).toEqual({ runningSandboxes: 2, vcpus: 2, memoryMB: 1024, createsPerMinute: 2, pausedSandboxes: 0 });
  });

  it("counts vCPUs and memory, and creates per minute only for creates, within the last minute", () => {
    const l = new Ledger();
    expect(l.reserve(req("a", 1, { cpu: 3 }), { ...NONE, vcpus: 4 }, 0).ok).toBe(true);
    expect(l.reserve(req("b", 1, { cpu: 2 }), { ...NONE, vcpus: 4 }, 0)).toMatchObject({ ok: false, over: { name: "vcpus", used: 3 } });
    expect(l.reserve(req("b", 1, { memoryMB: 2048 }), { ...NONE, memoryMB: 2048 }, 0)).toMatchObject({ ok: false, over: { name: "memoryMB" } });
    const rate = { ...NONE, createsPerMinute: 1 };
    expect(l.reserve(req("c"), rate, 1)).toMatchObject({ ok: false, over: { name: "createsPerMinute", used: 1 } });
    expect(l.reserve(req("c", 1, { create: false }), rate, 1).ok).toBe(true);
    expect(l.reserve(req("d"), rate, 60_001).ok).toBe(true);
  });

  it("is idempotent per key, and an older release never undoes a newer reserve", () => {
    const l = new Ledger();
    const one = { ...NONE, runningSandboxes: 1 };
    expect(l.reserve(req("a", 2), one, 0)).toMatchObject({ ok: true });
    expect(l.reserve(req("a", 2), one, 0)).toEqual({ ok: true, changed: null });
    expect(l.reserve(req("a", 4), one, 0)).toMatchObject({ ok: true, changed: { generation: 4 } });
    expect(l.release("a", 3)).toBe(false);
    expect(l.usage(0).runningSandboxes).toBe(1);
    expect(l.release("a", 4)).toBe(true);
    expect(l.release("a", 4)).toBe(false);
    expect(l.usage(0)).toMatchObject({ runningSandboxes: 0, vcpus: 0, memoryMB: 0 });
  });

  it("renames a pending reservation to the claimed sandbox, and force is never refused", () => {
    const l = new Ledger();
    const one = { ...NONE, runningSandboxes: 1 };
    l.reserve(req("pending:x", 0), one, 0);
    expect(l.rename("pending:x", "sbx", 3)).toMatchObject({ generation: 3 });
    expect([...l.reservations.keys()]).toEqual(["sbx"]);
    expect(l.reserve(req("other", 1, { force: true }), one, 0).ok).toBe(true);
    expect(l.usage(0).runningSandboxes).toBe(2);
  });

  it("the reconcile drops what no longer counts, and leaves young unknown ones alone", () => {
    const r = { cpu: 1, memoryMB: 1, generation: 5, at: 0 };
    expect(stale(r, { known: true, counted: true, generation: 9 }, RECONCILE_GRACE_MS * 10)).toBe(false);
    expect(stale(r, { known: true, counted: false, generation: 5 }, 1)).toBe(true);
    // A resume reserved at generation 5 that the group has not applied yet.
    expect(stale(r, { known: true, counted: false, generation: 4 }, 1)).toBe(false);
    expect(stale(r, { known: true, counted: false, generation: 4 }, RECONCILE_GRACE_MS)).toBe(true);
    expect(stale(r, { known: false }, 1)).toBe(false);
    expect(stale(r, { known: false }, RECONCILE_GRACE_MS)).toBe(true);
    expect(["Pending", "Running", "Resuming"].map((p) => holds(p, "Freeze"))).toEqual(["running", "running", "resuming"]);
    expect(["Pausing", "Paused"].map((p) => holds(p, "Freeze"))).toEqual(["frozen", "frozen"]);
    expect(["Pausing", "Paused", "Terminating", null].map((p) => holds(p, "Stop"))).toEqual(["stopped", "stopped", null, null]);
    // A Failed sandbox keeps its host side until it is killed: it holds what a running one does.
    expect(["Failed", "Failed"].map((p, i) => holds(p, i ? "Stop" : "Freeze"))).toEqual(["running", "running"]);
  });

  it("a Freeze-paused sandbox keeps its memory counted, not its vCPUs nor a running slot; its resume does not count the memory twice", () => {
    const l = new Ledger();
    const mem = { ...NONE, memoryMB: 1024, runningSandboxes: 1 };
    expect(l.reserve(req("a", 1), mem, 0).ok).toBe(true);
    // The pause: an assert that shrinks (never refused), at the pause's generation.
    expect(l.reserve(req("a", 2, { force: true, paused: "frozen" }), mem, 0)).toMatchObject({ ok: true, changed: { paused: "frozen", generation: 2 } });
    expect(l.usage(0)).toMatchObject({ runningSandboxes: 0, vcpus: 0, memoryMB: 512 });
    expect(l.reserve(req("b", 1), mem, 0).ok).toBe(true);
    expect(l.reserve(req("c", 1), { ...NONE, memoryMB: 1024 }, 0)).toEqual({ ok: false, over: { name: "memoryMB", used: 1024, limit: 1024 } });
    // Its resume asks for a running slot and its vCPUs only: memory is already held.
    expect(l.reserve(req("a", 3, { create: false }), mem, 0)).toMatchObject({ ok: false, over: { name: "runningSandboxes" } });
    expect(l.release("b", 1)).toBe(true);
    expect(l.reserve(req("a", 3, { create: false }), mem, 0)).toMatchObject({ ok: true, changed: { generation: 3 } });
    expect(l.reservations.get("a")?.paused).toBeUndefined();
    expect(l.usage(0)).toMatchObject({ runningSandboxes: 1, vcpus: 1, memoryMB: 512 });
    // The resume is not a create: the minute's count is the two creates.
    expect(l.usage(0).createsPerMinute).toBe(2);
    expect(l.release("a", 3)).toBe(true);
    expect(l.usage(0)).toMatchObject({ runningSandboxes: 0, vcpus: 0, memoryMB: 0 });
  });

  it("the reconcile turns a reservation into what its group holds: a lost pause's shrink, a resume that never happened", () => {
    const running = { cpu: 1, memoryMB: 1, generation: 5, at: 0 };
    const frozen = { ...running, paused: "frozen" as const };
    expect(reheld(running, { known: true, counted: true, paused: "frozen", generation: 6 }, 1)).toBe(true);
    expect(reheld(running, { known: true, counted: true, paused: "frozen", generation: 4 }, 1)).toBe(false);
    expect(reheld(running, { known: true, counted: true, paused: "frozen", generation: 4 }, RECONCILE_GRACE_MS)).toBe(true);
    expect(reheld(frozen, { known: true, counted: true, generation: 6 }, 1)).toBe(true);
    expect(reheld(frozen, { known: true, counted: true, paused: "frozen", generation: 6 }, 1)).toBe(false);
    expect(reheld(running, { known: true, counted: false, generation: 6 }, 1)).toBe(false);
    const l = new Ledger();
    l.reserve(req("a", 5), NONE, 0);
    expect(l.rehold("a", "frozen", 6, 1)).toMatchObject({ paused: "frozen", generation: 6, cpu: 1, memoryMB: 512 });
    expect(l.usage(1)).toMatchObject({ runningSandboxes: 0, vcpus: 0, memoryMB: 512, pausedSandboxes: 1 });
    // A census's guess (frozen) for a sandbox its group says is Stop-paused: a paused slot only.
    const stopped = { ...running, paused: "stopped" as const };
    expect(reheld(frozen, { known: true, counted: true, paused: "stopped", generation: 6 }, 1)).toBe(true);
    expect(reheld(stopped, { known: true, counted: true, paused: "stopped", generation: 6 }, 1)).toBe(false);
    expect(l.rehold("a", "stopped", 7, 1)).toMatchObject({ paused: "stopped", generation: 7 });
    expect(l.usage(1)).toMatchObject({ runningSandboxes: 0, memoryMB: 0, pausedSandboxes: 1 });
  });

  it("a pause asks for a paused slot (either strategy) and nothing else; its resume gives the slot back", () => {
    const l = new Ledger();
    const two = { ...NONE, pausedSandboxes: 2, runningSandboxes: 3, memoryMB: 1536 };
    for (const k of ["a", "b", "c"]) expect(l.reserve(req(k, 1), two, 0).ok).toBe(true);
    // Memory full, running slots full: a pause is refused for neither (it frees them or keeps them).
    expect(l.reserve(req("a", 2, { create: false, paused: "frozen" }), two, 0)).toMatchObject({ ok: true, changed: { paused: "frozen" } });
    expect(l.reserve(req("b", 2, { create: false, paused: "stopped" }), two, 0)).toMatchObject({ ok: true, changed: { paused: "stopped" } });
    expect(l.usage(0)).toMatchObject({ runningSandboxes: 1, vcpus: 1, memoryMB: 1024, pausedSandboxes: 2 });
    const r = l.reserve(req("c", 2, { create: false, paused: "stopped" }), two, 0);
    expect(r).toEqual({ ok: false, over: { name: "pausedSandboxes", used: 2, limit: 2 } });
    if (!r.ok) expect(overMessage("t", r.over)).toBe('team "t" has 2 of 2 paused sandboxes (quota pausedSandboxes)');
    expect(l.reservations.get("c")).not.toHaveProperty("stopped");
    // An assert (the pause happened without a reserve) is never refused; a resume frees the slot.
    expect(l.reserve(req("c", 2, { force: true, paused: "stopped" }), two, 0).ok).toBe(true);
    expect(l.usage(0).pausedSandboxes).toBe(3);
    expect(l.reserve(req("b", 3, { create: false }), two, 0).ok).toBe(true);
    expect(l.release("a", 2)).toBe(true);
    expect(l.usage(0)).toMatchObject({ runningSandboxes: 1, pausedSandboxes: 1, memoryMB: 512 });
  });

  it("a resume keeps the paused slot it resumes from until it ends: a failed one goes back to it, not past pausedSandboxes", () => {
    // Review M1 (rv35-resume): driven as quota-link drives it. Running 2, paused 1.
    const l = new Ledger();
    const limits = { ...NONE, runningSandboxes: 2, pausedSandboxes: 1 };
    expect(l.reserve(req("A", 1), limits, 0).ok).toBe(true);
    expect(l.reserve(req("B", 1), limits, 0).ok).toBe(true);
    expect(l.reserve(req("A", 2, { create: false, paused: "stopped" }), limits, 0).ok).toBe(true);
    // A resumes (beforeResume, gen 3): running and still its paused slot.
    expect(l.reserve(req("A", 3, { create: false, paused: "resuming" }), limits, 0).ok).toBe(true);
    expect(l.usage(0)).toMatchObject({ runningSandboxes: 2, pausedSandboxes: 1 });
    // B's pause meanwhile is refused: A's slot is not free.
    expect(l.reserve(req("B", 2, { create: false, paused: "stopped" }), limits, 0)).toEqual({ ok: false, over: { name: "pausedSandboxes", used: 1, limit: 1 } });
    // A's resume fails: the rollback (quota-link.follow, forced) at gen 4 goes back to its own slot.
    expect(l.reserve(req("A", 4, { create: false, force: true, paused: "stopped" }), limits, 0).ok).toBe(true);
    expect(l.usage(0)).toMatchObject({ runningSandboxes: 1, pausedSandboxes: 1 });
    // A resume that succeeds: the sandbox observed Running at the resume's own generation gives the
    // paused slot back (a shrink at an equal generation); a repeat of the resume's reserve there does not take it again.
    expect(l.reserve(req("A", 5, { create: false, paused: "resuming" }), { ...limits, runningSandboxes: 3 }, 0).ok).toBe(true);
    expect(l.reserve(req("A", 5, { create: false, force: true }), limits, 0)).toMatchObject({ ok: true, changed: { generation: 5 } });
    expect(l.reservations.get("A")?.paused).toBeUndefined();
    expect(l.usage(0)).toMatchObject({ runningSandboxes: 2, pausedSandboxes: 0 });
    expect(l.reserve(req("A", 5, { create: false, force: true, paused: "resuming" }), limits, 0)).toEqual({ ok: true, changed: null });
    expect(l.usage(0)).toMatchObject({ runningSandboxes: 2, pausedSandboxes: 0 });
    // The reconcile: a resuming reservation is what a Resuming sandbox holds; once it runs at that
    // generation (its shrink lost), the reconcile turns it into a running one.
    const resuming = { cpu: 1, memoryMB: 1, generation: 5, at: 0, paused: "resuming" as const };
    expect(reheld(resuming, { known: true, counted: true, paused: "resuming", generation: 5 }, RECONCILE_GRACE_MS)).toBe(false);
    expect(reheld(resuming, { known: true, counted: true, generation: 5 }, 1)).toBe(true);
  });

  it("reads defaults from the vars: unset is no limit, a malformed one throws", () => {
    expect(quotaDefaults({ QUOTA_RUNNING_SANDBOXES: "10", QUOTA_VCPUS: "" })).toEqual({ ...NONE, runningSandboxes: 10 });
    expect(() => quotaDefaults({ QUOTA_MEMORY_MB: "lots" })).toThrow(/QUOTA_MEMORY_MB/);
  });
});
