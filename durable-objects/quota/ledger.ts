// A team's quota as a pure ledger: reservations keyed by sandbox id (idempotent reserve and
// release, ordered by the sandbox's generation), plus the creates of the last minute. TeamQuotaDO
// keeps one in memory, writes its reservations to SQLite and performs the reconcile it asks for.
import type { QuotaLimits, QuotaName, QuotaUsage, SandboxQuotaName } from "../../schema/api/quota.ts";

export const MINUTE_MS = 60_000;

/** What a running sandbox holds. */
export interface Resources {
  cpu: number;
  memoryMB: number;
}

export interface Reservation extends Resources {
  /** The sandbox generation that reserved it: an older release does not undo a newer reserve. */
  generation: number;
  /** Paused (absent: running). `frozen` (Freeze): holds its memory and a paused slot, not a running
   * sandbox nor its vCPUs; `stopped` (Stop): a paused slot only (its disk stays on the host, its
   * memory does not); `resuming`: a resume in flight, what a running one holds and the paused slot
   * it resumes from, so a failed resume goes back to its own slot. The sizes are kept, so a resume
   * (or the reconcile) turns it back into a running one. */
  paused?: Kept;
  /** When it was (re)reserved: the reconcile leaves young ones alone (their sandbox may not exist yet). */
  at: number;
}

export interface QuotaRequest extends Resources {
  /** Sandbox id, or a pending key while the pool has not named the sandbox yet. */
  key: string;
  generation: number;
  /** A create (counts against the creates per minute), not a resume. */
  create: boolean;
  /** Assert a sandbox that already runs (never refused): a lost reserve must not be refused twice. */
  force?: boolean;
  /** What a paused (or resuming) sandbox holds (see `holds`); absent: a running one. */
  paused?: Kept;
}

export interface Over {
  name: QuotaName;
  used: number;
  limit: number;
}

export class Ledger {
  readonly reservations = new Map<string, Reservation>();
  /** Times of the creates admitted in the last minute (memory only: see the README). */
  private creates: number[] = [];
  /** Index of the oldest create still inside the window. */
  private head = 0;
  /** What the reservations hold: running ones count the first three, paused ones a paused slot
   * (frozen ones their memory too). */
  private totals: Weight = { running: 0, cpu: 0, memoryMB: 0, paused: 0 };

  constructor(rows: Iterable<[string, Reservation]> = []) {
    for (const [key, r] of rows) this.put(key, r);
  }

  usage(now: number): QuotaUsage {
    this.prune(now);
    const t = this.totals;
    return { runningSandboxes: t.running, vcpus: t.cpu, memoryMB: t.memoryMB, createsPerMinute: this.creates.length - this.head, pausedSandboxes: t.paused };
  }

  /**
   * Reserves `req` unless a limit would be passed; the changed reservation (to store) or the
   * limit that refused it. A key already reserved is not counted again (its generation moves up).
   */
  reserve(req: QuotaRequest, limits: QuotaLimits, now: number): { ok: true; changed: Reservation | null } | { ok: false; over: Over } {
    const held = this.reservations.get(req.key);
    if (held && held.generation >= req.generation && !endsResume(held, req)) return { ok: true, changed: null };
    const next = reservation(req.cpu, req.memoryMB, req.generation, now, req.paused ?? null);
    if (!req.force) {
      // Only what grows is checked: a frozen sandbox's resume asks for its vCPUs and a running
      // slot, not its memory again; a pause asks for a paused slot only (it frees the rest).
      const u = this.usage(now);
      const add = weight(next);
      const had = held ? weight(held) : NOTHING;
      const grows = (name: keyof Weight) => add[name] > had[name];
      const over =
        (grows("running") ? check("runningSandboxes", u.runningSandboxes + add.running - had.running, limits) : null) ??
        (grows("cpu") ? check("vcpus", u.vcpus + add.cpu - had.cpu, limits) : null) ??
        (grows("memoryMB") ? check("memoryMB", u.memoryMB + add.memoryMB - had.memoryMB, limits) : null) ??
        (grows("paused") ? check("pausedSandboxes", u.pausedSandboxes + add.paused - had.paused, limits) : null) ??
        (req.create && !held ? check("createsPerMinute", u.createsPerMinute + 1, limits) : null);
      if (over) return { ok: false, over: { ...over, used: u[over.name] } };
    }
    if (req.create && !held) this.creates.push(now);
    if (held) this.drop(req.key, held);
    this.put(req.key, next);
    return { ok: true, changed: next };
  }

  /** Drops the reservation unless a newer generation holds it; true when it went. */
  release(key: string, generation: number): boolean {
    const held = this.reservations.get(key);
    if (!held || held.generation > generation) return false;
    this.drop(key, held);
    return true;
  }

  /** The reconcile: the reservation becomes what its group holds at `generation` (never refused). */
  rehold(key: string, paused: Kept | null, generation: number, now: number): Reservation | null {
    const held = this.reservations.get(key);
    if (!held) return null;
    const next = reservation(held.cpu, held.memoryMB, generation, now, paused);
    this.drop(key, held);
    this.put(key, next);
    return next;
  }

  /** A pending reservation takes its sandbox's id once the pool named it. */
  rename(from: string, to: string, generation: number): Reservation | null {
    const held = this.reservations.get(from);
    if (!held) return null;
    this.release(from, Number.MAX_SAFE_INTEGER);
    const r = { ...held, generation };
    this.put(to, r);
    return r;
  }

  private put(key: string, r: Reservation): void {
    this.reservations.set(key, r);
    this.count(r, 1);
  }

  private drop(key: string, r: Reservation): void {
    this.reservations.delete(key);
    this.count(r, -1);
  }

  private count(r: Reservation, sign: 1 | -1): void {
    const w = weight(r);
    this.totals.running += sign * w.running;
    this.totals.cpu += sign * w.cpu;
    this.totals.memoryMB += sign * w.memoryMB;
    this.totals.paused += sign * w.paused;
  }

  /** Drops creates older than a minute; the array is compacted only once half of it is dead. */
  private prune(now: number): void {
    while (this.head < this.creates.length && this.creates[this.head]! <= now - MINUTE_MS) this.head++;
    if (this.head > 64 && this.head * 2 > this.creates.length) {
      this.creates = this.creates.slice(this.head);
      this.head = 0;
    }
  }
}

/** What a paused sandbox holds: a paused slot, and its memory too when Freeze-paused ("frozen"). */
export type PausedHold = "frozen" | "stopped";

/** What a reservation holds besides what a running sandbox does, or instead of it: paused, or a
 * resume in flight (`resuming`: what a running one holds and the paused slot it resumes from, kept
 * until the resume ends, so a resume that fails goes back to a slot nobody else took meanwhile). */
export type Kept = PausedHold | "resuming";

/** What a sandbox holds against the quota: all but a paused slot while it runs (or has failed), a
 * paused slot (and its memory when frozen) while paused, both while it resumes. */
export type Hold = "running" | Kept | null;

/** What the sandbox's group says of a reserved sandbox when the reconcile asks (`paused`: how it
 * is paused; absent: running, or not counted). */
export type Held = { known: false } | { known: true; counted: boolean; paused?: Kept; generation: number };

/** How a group's answer says the sandbox is paused (null: running, or not counted). */
export function heldPaused(h: Extract<Held, { known: true }>): Kept | null {
  return h.paused ?? null;
}

/** How a reservation says the sandbox is paused (null: running). */
export function reservedPaused(r: Reservation): Kept | null {
  return r.paused ?? null;
}

/** Reservations younger than this are left alone: the sandbox may not be in its group yet. */
export const RECONCILE_GRACE_MS = 60_000;

/** Whether the reconcile drops a reservation, from what its group says. */
export function stale(r: Reservation, held: Held, now: number): boolean {
  if (held.known && held.counted) return false;
  if (held.known && held.generation >= r.generation) return true;
  return now - r.at >= RECONCILE_GRACE_MS;
}

/**
 * Whether the reconcile turns a reservation into what its group says it holds (running, frozen, stopped):
 * a pause's call that was lost, or a resume reserved and then refused or lost (the group stays
 * behind the reservation's generation past the grace), as `stale` drops one that holds nothing.
 */
export function reheld(r: Reservation, held: Held, now: number): held is Extract<Held, { known: true }> {
  if (!held.known || !held.counted || heldPaused(held) === reservedPaused(r)) return false;
  return held.generation >= r.generation || now - r.at >= RECONCILE_GRACE_MS;
}

/**
 * What a sandbox in this phase holds. E2B counts running sandboxes only, because its pause writes
 * the memory to disk; a Freeze pause here keeps the sandbox's memory on its host (cgroup frozen),
 * so a Freeze-paused (or Freeze-pausing) sandbox keeps its memory counted, not its vCPUs nor a
 * running slot. Every paused (or pausing) one holds a paused slot: a Stop pause still keeps the
 * sandbox's disk on its host, so their number is bounded (`pausedSandboxes`).
 *
 * A Failed one holds all a running one does until it is killed: failing deletes nothing on its
 * host (a ready command that fails leaves its processes running; a failed pause leaves its disk,
 * cgroup, uid range and address), and the tenant decides when its sandboxes fail, so a quota that
 * let go at Failed would bound nothing (quotas fail closed). Its kill is the machine's (machine.ts
 * `FAILED_RETAIN_MS`), as a kill frees any sandbox's slot. A failed resume is not Failed: it goes
 * back to Pausing (machine.ts `resumeFailed`), a paused slot again: the one its resume kept
 * (`resuming`), so a rollback never takes a paused slot another pause took meanwhile.
 */
export function holds(phase: string | null | undefined, pauseStrategy?: string): Hold {
  if (phase === "Resuming") return "resuming";
  if (phase === "Pending" || phase === "Running" || phase === "Failed") return "running";
  if (phase === "Pausing" || phase === "Paused") return pauseStrategy === "Freeze" ? "frozen" : "stopped";
  return null;
}

export function overMessage(team: string, over: Over): string {
  const what: Record<QuotaName, string> = {
    runningSandboxes: "running sandboxes",
    vcpus: "vCPUs in running sandboxes",
    memoryMB: "MB of memory in running and Freeze-paused sandboxes",
    createsPerMinute: "sandbox creates in the last minute",
    pausedSandboxes: "paused sandboxes",
    snapshots: "snapshots",
  };
  return `team "${team}" has ${over.used} of ${over.limit} ${what[over.name]} (quota ${over.name})`;
}

/** A reservation as stored: `paused` (`frozen`, `stopped` or `resuming`) only when it is (a running one has no such key). */
function reservation(cpu: number, memoryMB: number, generation: number, at: number, paused: Kept | null): Reservation {
  return { cpu, memoryMB, generation, at, ...(paused ? { paused } : {}) };
}

interface Weight {
  running: number;
  cpu: number;
  memoryMB: number;
  paused: number;
}

const NOTHING: Weight = { running: 0, cpu: 0, memoryMB: 0, paused: 0 };

/** What a reservation adds to the totals. */
function weight(r: Reservation): Weight {
  if (r.paused === "resuming") return { running: 1, cpu: r.cpu, memoryMB: r.memoryMB, paused: 1 };
  if (r.paused === "frozen") return { running: 0, cpu: 0, memoryMB: r.memoryMB, paused: 1 };
  if (r.paused === "stopped") return { running: 0, cpu: 0, memoryMB: 0, paused: 1 };
  return { running: 1, cpu: r.cpu, memoryMB: r.memoryMB, paused: 0 };
}

/**
 * A resume's end at the resume's own generation (the sandbox observed Running, or Failed, does not
 * move its generation): a `resuming` reservation gives back its paused slot. Only this shrink is
 * taken at an equal generation; anything else there is a repeat.
 */
function endsResume(held: Reservation, req: QuotaRequest): boolean {
  return held.generation === req.generation && held.paused === "resuming" && req.paused !== "resuming";
}

function check(name: SandboxQuotaName, wanted: number, limits: QuotaLimits): { name: SandboxQuotaName; limit: number } | null {
  const limit = limits[name];
  return limit !== null && wanted > limit ? { name, limit } : null;
}
