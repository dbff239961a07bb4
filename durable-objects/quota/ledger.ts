// A team's quota as a pure ledger: reservations keyed by sandbox id (idempotent reserve and
// release, ordered by the sandbox's generation), plus the creates of the last minute. TeamQuotaDO
// keeps one in memory, writes its reservations to SQLite and performs the reconcile it asks for.
import type { QuotaLimits, QuotaName, QuotaUsage } from "../../schema/api/quota.ts";

export const MINUTE_MS = 60_000;

/** What a running sandbox holds. */
export interface Resources {
  cpu: number;
  memoryMB: number;
}

export interface Reservation extends Resources {
  /** The sandbox generation that reserved it: an older release does not undo a newer reserve. */
  generation: number;
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
  private totals: Resources = { cpu: 0, memoryMB: 0 };

  constructor(rows: Iterable<[string, Reservation]> = []) {
    for (const [key, r] of rows) this.put(key, r);
  }

  usage(now: number): QuotaUsage {
    this.prune(now);
    return { runningSandboxes: this.reservations.size, vcpus: this.totals.cpu, memoryMB: this.totals.memoryMB, createsPerMinute: this.creates.length - this.head };
  }

  /**
   * Reserves `req` unless a limit would be passed; the changed reservation (to store) or the
   * limit that refused it. A key already reserved is not counted again (its generation moves up).
   */
  reserve(req: QuotaRequest, limits: QuotaLimits, now: number): { ok: true; changed: Reservation | null } | { ok: false; over: Over } {
    const held = this.reservations.get(req.key);
    if (held) {
      if (held.generation >= req.generation) return { ok: true, changed: null };
      const next = { ...held, generation: req.generation, at: now };
      this.reservations.set(req.key, next);
      return { ok: true, changed: next };
    }
    if (!req.force) {
      const u = this.usage(now);
      const over =
        check("runningSandboxes", u.runningSandboxes + 1, limits) ??
        check("vcpus", u.vcpus + req.cpu, limits) ??
        check("memoryMB", u.memoryMB + req.memoryMB, limits) ??
        (req.create ? check("createsPerMinute", u.createsPerMinute + 1, limits) : null);
      if (over) return { ok: false, over: { ...over, used: u[over.name] } };
    }
    if (req.create) this.creates.push(now);
    const r: Reservation = { cpu: req.cpu, memoryMB: req.memoryMB, generation: req.generation, at: now };
    this.put(req.key, r);
    return { ok: true, changed: r };
  }

  /** Drops the reservation unless a newer generation holds it; true when it went. */
  release(key: string, generation: number): boolean {
    const held = this.reservations.get(key);
    if (!held || held.generation > generation) return false;
    this.reservations.delete(key);
    this.totals.cpu -= held.cpu;
    this.totals.memoryMB -= held.memoryMB;
    return true;
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
    this.totals.cpu += r.cpu;
    this.totals.memoryMB += r.memoryMB;
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

/** What the sandbox's group says of a reserved sandbox when the reconcile asks. */
export type Held = { known: false } | { known: true; counted: boolean; generation: number };

/** Reservations younger than this are left alone: the sandbox may not be in its group yet. */
export const RECONCILE_GRACE_MS = 60_000;

/** Whether the reconcile drops a reservation, from what its group says. */
export function stale(r: Reservation, held: Held, now: number): boolean {
  if (held.known && held.counted) return false;
  if (held.known && held.generation >= r.generation) return true;
  return now - r.at >= RECONCILE_GRACE_MS;
}

/** Whether a sandbox in this phase counts against the quota: E2B counts running ones only. */
export function counts(phase: string | null | undefined): boolean {
  return phase === "Pending" || phase === "Running" || phase === "Resuming";
}

export function overMessage(team: string, over: Over): string {
  const what: Record<QuotaName, string> = {
    runningSandboxes: "running sandboxes",
    vcpus: "vCPUs in running sandboxes",
    memoryMB: "MB of memory in running sandboxes",
    createsPerMinute: "sandbox creates in the last minute",
  };
  return `team "${team}" has ${over.used} of ${over.limit} ${what[over.name]} (quota ${over.name})`;
}

function check(name: QuotaName, wanted: number, limits: QuotaLimits): { name: QuotaName; limit: number } | null {
  const limit = limits[name];
  return limit !== null && wanted > limit ? { name, limit } : null;
}
