// TeamQuotaDO: one per team (`idFromName(teamId)`), the one counter of the team's running
// sandboxes, their vCPUs and memory (and the memory of Freeze-paused ones), its paused sandboxes,
// and its creates per minute. A create claims through it (reserve, then PoolDO.claim, then the reservation takes the
// sandbox's id), so 100 concurrent creates against a limit of 10 give exactly 10: the check and the
// count are one synchronous step of one object. The sandbox's group releases the reservation when
// the sandbox stops counting (killed, failed, gone), reserves before a pause (refusable: a paused
// slot; a Freeze pause keeps its memory, a Stop pause nothing else), re-reserves before a resume
// (refusable), and asserts one that counts again any other way; the reconcile (alarm, and after a refusal) asks the groups about
// every reservation, so a lost release cannot hold a slot forever.
//
// Fails closed: a reservation is stored before the claim answers, and when the rows cannot be read
// or written the answer is `quota_unavailable` (503), never a create let through.
import { stubOf } from "../object-ids.ts";
import { DurableObject } from "cloudflare:workers";
import type { Env } from "../env.ts";
import type { Claimed, ClaimResult } from "../pool/rpc.ts";
import { QUOTA_NAMES, quotaDefaults, type QuotaLimits, type QuotaUsage, type TeamQuotaUpdate } from "../../schema/api/quota.ts";
import { ErrorCode, type Refusal } from "../../schema/errors.ts";
import { getDb } from "../store/db.ts";
import { listLiveOfTeam } from "../store/sandbox-index.ts";
import { sandboxGroupOf, sandboxGroupStub } from "../sandbox/stub.ts";
import { TurnWrites } from "../turn-writes.ts";
import { heldPaused, Ledger, overMessage, reheld, stale, type Held, type Hold, type Kept, type QuotaRequest, type Reservation, type Resources } from "./ledger.ts";
import { openQuotaStore, type QuotaStore } from "./store.ts";
import { afterClaim, createClaimed, noStock, type ClaimCreate, type ClaimCreateResult, type Created } from "./claim-create.ts";
import { deleteIntent } from "../cluster/machine.ts";
import { edgeLogger } from "../tracing/edge-log.ts";
import { flushEdgeTraces, leafSpan } from "../tracing/edge-tracing.ts";

const LOG = edgeLogger("team-quota");

/** How often the reservations are checked against the groups while there are any. */
const RECONCILE_EVERY_MS = 5 * 60_000;
/** A refusal starts a reconcile unless one ran this recently. */
const RECONCILE_ON_REFUSAL_MS = 30_000;

export interface QuotaClaim extends Resources {
  teamId: string;
  teamName: string;
  /** The PoolDO to claim from (`poolName` in functions/api/stubs.ts). */
  pool: string;
  /** A new sandbox whatever the pool's stock (one made from a snapshot). */
  fresh?: boolean;
  /** The caller's span: the pool call is its child. */
  traceparent?: string;
}

export interface QuotaReserve extends Resources {
  teamId: string;
  teamName: string;
  sandboxId: string;
  generation: number;
  /** Never refused: the sandbox already counts (see the group's quota link). */
  force?: boolean;
  /** Paused: a paused slot (and its memory when frozen), not a running one; `resuming`: both. */
  paused?: Kept;
}

export interface QuotaStatus {
  limits: QuotaLimits;
  /** The team's own limits; the rest are the deployment's defaults. */
  overrides: TeamQuotaUpdate;
  usage: QuotaUsage;
}

type Result<T = object> = ({ ok: true } & T) | { ok: false; error: Refusal };

export class TeamQuotaDO extends DurableObject<Env> {
  private readonly store: QuotaStore = openQuotaStore(this.ctx.storage.sql);
  /** Null until loaded, and again after a failed write (reloaded from what is stored). */
  private ledger: Ledger | null = null;
  private overrides: TeamQuotaUpdate = {};
  /** The limits in force, for the overrides object they were built from. */
  private limits: { of: TeamQuotaUpdate; limits: QuotaLimits } | null = null;
  private lastReconcile = 0;
  private reconciling: Promise<void> | null = null;
  private alarmSet = false;
  /** Whether the sandboxes that predate this object have been counted (stored once done). */
  private census = false;
  /** Numbers the pending reservations of claims in flight. */
  private pendingSeq = 0;
  private censusRun: Promise<Refusal | null> | null = null;
  /** Concurrent claims share one commit; each answers after it. */
  private readonly turn = new TurnWrites("team quota", this.ctx.storage, () => {
    this.ledger = null;
  });

  /**
   * A whole create in one call from the Worker: `claim`, then the claimed member to its group
   * (claim-create.ts). A member nobody will create (no stock, and the create does not mint one)
   * gives its reservation back at once.
   */
  async create(req: QuotaClaim & ClaimCreate): Promise<ClaimCreateResult> {
    const started = Date.now();
    const claimed = await this.claim(req);
    const claimMs = Date.now() - started;
    if (!claimed.ok) return { ...claimed, claimMs };
    if (!claimed.warm && !req.createOnNoStock) {
      await this.release(claimed.sandboxId, claimed.generation + 1);
      return { ok: false, error: noStock(req.draft.templateId), warm: false, claimMs };
    }
    // From here the member is claimed: every failure says what exists, none is a refusal.
    let res: Created;
    try {
      res = await createClaimed(this.env, claimed, req);
      if (!res.ok && res.exists === false) await this.giveBack(claimed);
      if (req.traceparent) {
        const flushing = flushEdgeTraces();
        if (flushing) this.ctx.waitUntil(flushing);
      }
    } catch (err) {
      res = { ok: false, error: afterClaim(claimed.sandboxId, String(err), null) };
    }
    return { ...res, warm: claimed.warm, claimMs };
  }

  /** A claimed member no group took: its reservation released, and a warm one deleted on its cluster. */
  private async giveBack(claimed: Claimed): Promise<void> {
    const generation = claimed.generation + 1;
    await this.release(claimed.sandboxId, generation);
    if (claimed.state === "new") return;
    const cluster = this.env.CLUSTER.get(this.env.CLUSTER.idFromName(claimed.cluster));
    await cluster.enqueue([deleteIntent(claimed.sandboxId, generation, Date.now())]);
  }

  /** Reserves, claims from the pool, and keeps the reservation under the claimed sandbox's id. */
  async claim(req: QuotaClaim): Promise<ClaimResult> {
    const counted = await this.counted(req.teamId, req.teamName);
    if (counted) return { ok: false, error: counted };
    const loaded = this.loaded(req.teamName);
    if (!loaded.ok) return loaded;
    // In memory only (never stored: a restart ends the claim too), so unique per instance is enough.
    const pending = `pending:${++this.pendingSeq}`;
    const reserved = loaded.ledger.reserve({ key: pending, generation: 0, cpu: req.cpu, memoryMB: req.memoryMB, create: true }, loaded.limits, Date.now());
    if (!reserved.ok) {
      this.reconcileSoon();
      return { ok: false, error: { code: ErrorCode.quotaExceeded, message: overMessage(req.teamName, reserved.over) } };
    }
    let claimed: ClaimResult;
    try {
      const pool = stubOf(this.env.POOL, req.pool);
      const take = (): Promise<ClaimResult> => pool.claim({ fresh: req.fresh });
      claimed = req.traceparent ? await leafSpan(this.env, "PoolDO.claim", { "pool.name": req.pool }, take, req.traceparent) : await take();
    } catch (err) {
      claimed = { ok: false, error: { code: ErrorCode.internal, message: `pool ${req.pool}: ${String(err)}` } };
    }
    if (req.traceparent) {
      const flushing = flushEdgeTraces();
      if (flushing) this.ctx.waitUntil(flushing);
    }
    const ledger = this.ledger; // null if a failed write reset it meanwhile
    if (!claimed.ok) {
      ledger?.release(pending, Number.MAX_SAFE_INTEGER);
      return claimed;
    }
    // The create's first generation (SandboxGroupDO.create: the pool's + 1).
    const generation = claimed.generation + 1;
    const row =
      ledger?.rename(pending, claimed.sandboxId, generation) ??
      this.force({ sandboxId: claimed.sandboxId, generation, cpu: req.cpu, memoryMB: req.memoryMB, teamId: req.teamId, teamName: req.teamName });
    if (!row) return unavailable(req.teamName, "its reservations cannot be read");
    const failed = await this.write(claimed.sandboxId, row, req.teamName);
    if (failed) return { ok: false, error: failed };
    return claimed;
  }

  /** Before a pause or a resume (refusable), or to assert a sandbox that counts again (`force`). Idempotent. */
  async reserve(req: QuotaReserve): Promise<Result> {
    const counted = await this.counted(req.teamId, req.teamName);
    if (counted) return { ok: false, error: counted };
    const loaded = this.loaded(req.teamName);
    if (!loaded.ok) return loaded;
    const q: QuotaRequest = { key: req.sandboxId, generation: req.generation, cpu: req.cpu, memoryMB: req.memoryMB, create: false, force: req.force, paused: req.paused };
    const r = loaded.ledger.reserve(q, loaded.limits, Date.now());
    if (!r.ok) {
      this.reconcileSoon();
      return { ok: false, error: { code: ErrorCode.quotaExceeded, message: overMessage(req.teamName, r.over) } };
    }
    const failed = r.changed ? await this.write(req.sandboxId, r.changed, req.teamName) : null;
    return failed ? { ok: false, error: failed } : { ok: true };
  }

  /**
   * A pause reserved at `reserved` that was not stored (its row write failed, or the sandbox changed
   * meanwhile: a timeout extended while an auto-pause's reserve was in flight): unless something
   * newer was reserved since, the reservation becomes what the sandbox holds now (`hold` at its
   * `generation`), so its running slot is not left uncounted until the reconcile.
   */
  async revert(sandboxId: string, reserved: number, hold: Hold, generation: number): Promise<Result> {
    const loaded = this.loaded();
    if (!loaded.ok) return loaded;
    if (loaded.ledger.reservations.get(sandboxId)?.generation !== reserved) return { ok: true };
    const next = hold ? loaded.ledger.rehold(sandboxId, hold === "running" ? null : hold, generation, Date.now()) : null;
    if (!hold) loaded.ledger.release(sandboxId, reserved);
    const failed = await this.write(sandboxId, next);
    return failed ? { ok: false, error: failed } : { ok: true };
  }

  /** The sandbox stopped counting at `generation` (an older release never undoes a newer reserve). */
  async release(sandboxId: string, generation: number): Promise<Result> {
    const loaded = this.loaded();
    if (!loaded.ok) return loaded;
    if (!loaded.ledger.release(sandboxId, generation)) return { ok: true };
    const failed = await this.write(sandboxId, null);
    return failed ? { ok: false, error: failed } : { ok: true };
  }

  /** Admin: replaces the team's own limits. */
  async setLimits(overrides: TeamQuotaUpdate): Promise<Result<{ status: QuotaStatus }>> {
    const loaded = this.loaded();
    if (!loaded.ok) return loaded;
    this.turn.flush();
    try {
      this.store.saveOverrides(overrides);
    } catch (err) {
      return unavailable("", `its limits cannot be written: ${String(err)}`);
    }
    this.overrides = overrides;
    return this.status();
  }

  async status(): Promise<Result<{ status: QuotaStatus }>> {
    const loaded = this.loaded();
    if (!loaded.ok) return loaded;
    return { ok: true, status: { limits: loaded.limits, overrides: this.overrides, usage: loaded.ledger.usage(Date.now()) } };
  }

  /** Operators and tests: runs the reconcile now. */
  async reconcile(): Promise<Result<{ released: string[] }>> {
    const loaded = this.loaded();
    if (!loaded.ok) return loaded;
    return { ok: true, released: await this.reconcileNow(loaded.ledger) };
  }

  override async alarm(): Promise<void> {
    this.alarmSet = false;
    const loaded = this.loaded();
    if (!loaded.ok) {
      this.arm();
      return;
    }
    await this.reconcileNow(loaded.ledger);
    if (loaded.ledger.reservations.size > 0) this.arm();
  }

  /** The ledger and the limits in force, or the refusal that fails the call closed. */
  private loaded(teamName = ""): ({ ok: true; ledger: Ledger; limits: QuotaLimits }) | { ok: false; error: Refusal } {
    try {
      if (!this.ledger) {
        const stored = this.store.load();
        this.ledger = new Ledger(stored.reservations);
        this.overrides = stored.overrides;
        this.census = stored.census;
        if (this.ledger.reservations.size > 0) this.arm();
      }
      // Asked two or three times per claim: built again only when the team's own limits change.
      let limits = this.limits;
      if (limits?.of !== this.overrides) {
        const defaults = quotaDefaults(this.env as unknown as Record<string, unknown>);
        const now = {} as QuotaLimits;
        for (const name of QUOTA_NAMES) now[name] = this.overrides[name] ?? defaults[name];
        this.limits = limits = { of: this.overrides, limits: now };
      }
      return { ok: true, ledger: this.ledger, limits: limits.limits };
    } catch (err) {
      this.ledger = null;
      return unavailable(teamName, `it cannot be read: ${String(err)}`);
    }
  }

  /**
   * Once per team: sandboxes that were running before this object counted anything (created
   * before quotas existed), and paused ones (as frozen: before frozen memory counted, a pause
   * released it; before paused sandboxes counted, a Stop pause did), are reserved from the index, at generation 0 so any release drops them; the
   * reconcile then checks them against their groups. Until it is done nothing is reserved
   * (concurrent calls wait for the same census), and if the index cannot be read the call is
   * refused (503) and the census is tried again on the next.
   */
  private async counted(teamId: string, teamName: string): Promise<Refusal | null> {
    const loaded = this.loaded(teamName);
    if (!loaded.ok) return loaded.error;
    if (this.census) return null;
    if (!this.censusRun) {
      const run = this.takeCensus(teamId, teamName);
      this.censusRun = run;
      void run.then(() => {
        if (this.censusRun === run) this.censusRun = null;
      });
    }
    return this.censusRun;
  }

  private async takeCensus(teamId: string, teamName: string): Promise<Refusal | null> {
    try {
      const rows = await listLiveOfTeam(getDb(this.env), teamId);
      const loaded = this.loaded(teamName);
      if (!loaded.ok) return loaded.error;
      const store = this.store;
      const now = Date.now();
      for (const row of rows) {
        // A paused one as frozen (its memory and a paused slot): the reconcile makes it stopped
        // (a paused slot only) if it was Stop-paused.
        const paused = row.state === "paused" ? ("frozen" as const) : undefined;
        const r = loaded.ledger.reserve({ key: row.id, generation: 0, cpu: row.cpuCount, memoryMB: row.memoryMB, create: false, force: true, paused }, loaded.limits, now);
        const changed = r.ok ? r.changed : null;
        if (changed) this.turn.defer(() => store.put(row.id, changed));
      }
      this.turn.defer(() => store.markCensus(now));
      await this.turn.written;
      this.census = true;
      if (rows.length > 0) this.arm();
      return null;
    } catch (err) {
      return unavailable(teamName, `its census of running sandboxes failed: ${String(err)}`).error;
    }
  }

  /** A claimed sandbox whose pending reservation a reset dropped: it counts, whatever the limits. */
  private force(req: QuotaReserve): Reservation | null {
    const loaded = this.loaded(req.teamName);
    if (!loaded.ok) return null;
    const r = loaded.ledger.reserve({ key: req.sandboxId, generation: req.generation, cpu: req.cpu, memoryMB: req.memoryMB, create: false, force: true }, loaded.limits, Date.now());
    return r.ok ? (r.changed ?? loaded.ledger.reservations.get(req.sandboxId) ?? null) : null;
  }

  /** Stores (or, for null, deletes) one reservation with this turn's other writes. */
  private async write(sandboxId: string, r: Reservation | null, teamName = ""): Promise<Refusal | null> {
    const store = this.store;
    this.turn.defer(() => (r ? store.put(sandboxId, r) : store.remove(sandboxId)));
    if (r) this.arm();
    try {
      await this.turn.written;
      return null;
    } catch (err) {
      return unavailable(teamName, `its reservations cannot be written: ${String(err)}`).error;
    }
  }

  private arm(): void {
    if (this.alarmSet) return;
    this.alarmSet = true;
    void this.ctx.storage.setAlarm(Date.now() + RECONCILE_EVERY_MS);
  }

  private reconcileSoon(): void {
    if (this.reconciling || Date.now() - this.lastReconcile < RECONCILE_ON_REFUSAL_MS || !this.ledger) return;
    this.ctx.waitUntil(this.reconcileNow(this.ledger));
  }

  /** Asks each group holding reserved sandboxes (one call per group), drops the stale ones and
   * re-asserts the rest as their group holds them (running, frozen or stopped). */
  private async reconcileNow(ledger: Ledger): Promise<string[]> {
    if (this.reconciling) await this.reconciling;
    const released: string[] = [];
    /** Reservations turned into what their group holds (a lost pause's or resume's call). */
    const changed = new Map<string, Reservation>();
    const run = async () => {
      this.lastReconcile = Date.now();
      const byGroup = new Map<string, [string, number][]>();
      for (const [id, r] of ledger.reservations) {
        if (id.startsWith("pending:")) continue;
        const g = sandboxGroupOf(id);
        byGroup.set(g, [...(byGroup.get(g) ?? []), [id, r.generation]]);
      }
      await Promise.all(
        [...byGroup.values()].map(async (entries) => {
          let held: Record<string, Held>;
          try {
            held = await sandboxGroupStub(this.env, entries[0]![0]).quotaHeld(entries.map(([id]) => id));
          } catch (err) {
            LOG.error("reconcile could not ask a sandbox group", { error: err });
            return;
          }
          const now = Date.now();
          for (const [id, generation] of entries) {
            const r = ledger.reservations.get(id);
            const h = held[id] ?? { known: false };
            if (!r || r.generation !== generation) continue;
            if (stale(r, h, now)) {
              if (ledger.release(id, generation)) released.push(id);
            } else if (reheld(r, h, now)) {
              const next = ledger.rehold(id, heldPaused(h), h.generation, now);
              if (next) changed.set(id, next);
            }
          }
        }),
      );
      if ((released.length > 0 || changed.size > 0) && this.ledger === ledger) {
        const store = this.store;
        this.turn.defer(() => {
          released.forEach((id) => store.remove(id));
          changed.forEach((r, id) => store.put(id, r));
        });
        await this.turn.written?.catch(() => undefined);
      }
    };
    this.reconciling = run().finally(() => (this.reconciling = null));
    await this.reconciling;
    return released;
  }
}

function unavailable(team: string, why: string): { ok: false; error: Refusal } {
  return { ok: false, error: { code: ErrorCode.quotaUnavailable, message: `The quota of team${team ? ` "${team}"` : ""} is unavailable (${why}); the request is refused` } };
}
