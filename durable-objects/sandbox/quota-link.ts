// The sandbox group's side of the team quota (TeamQuotaDO): a pause and a resume reserve before
// they happen (and may be refused with 429: a paused slot, a running one), and after every
// committed transition the group tells the quota when a sandbox stops counting (release) or counts
// again without a reserve, or holds less: an assert, never refused. A client's
// own change waits for the first try; failed tries are retried in the background, and one lost
// for good is found by the quota's reconcile.
import type { Env } from "../env.ts";
import { ErrorCode, type Refusal } from "../../schema/errors.ts";
import { holds, type Hold, type Kept } from "../quota/ledger.ts";
import type { SandboxEvent } from "./events.ts";
import type { Result, SandboxState } from "./state.ts";
import { edgeLogger } from "../tracing/edge-log.ts";

const LOG = edgeLogger("sandbox-group");

const RETRIES_MS = [250, 1_000, 4_000];
/** How long a pause's reservation made before its prePause hook is taken as still held (the quota's
 * reconcile leaves one its group has not reached for 60 s). */
const RESERVED_FRESH_MS = 30_000;

export class QuotaLink {
  private readonly env: Env;
  private readonly background: (p: Promise<unknown>) => void;
  /** Pauses reserved (`beforePause`) and not settled yet (`afterPause`), by sandbox: a pause whose
   * slot was reserved before its prePause hook ran finds it here. In memory: a new instance just
   * reserves again (a repeat at the same generation changes nothing in the ledger). */
  private readonly reserved = new Map<string, { planned: SandboxState; at: number }>();

  constructor(env: Env, background: (p: Promise<unknown>) => void) {
    this.env = env;
    this.background = background;
  }

  /** Before a resume: reserves the sandbox at the generation the resume will have, keeping the
   * paused slot it resumes from (`resuming`) until the resume ends (`follow`): a resume that fails
   * goes back to it. */
  async beforeResume(s: SandboxState): Promise<Result> {
    try {
      return await this.quota(s).reserve(request(s, s.generation + 1, false, "resuming"));
    } catch (err) {
      return { ok: false, error: unavailable(s, err, "resume") };
    }
  }

  /**
   * Before a pause (a client's, kubectl's, the probe's or the auto-pause at timeout): reserves the
   * paused slot the sandbox holds as `after`, the machine's transition not applied yet, at its
   * generation. Refused over `pausedSandboxes`; nothing to reserve when `after` is not paused, nor
   * when this very pause was reserved moments ago (before its prePause hook ran).
   */
  async beforePause(after: SandboxState): Promise<Result> {
    const hold = held(after);
    if (hold !== "frozen" && hold !== "stopped") return { ok: true };
    if (this.reservedPause(after.spec.id, after)) return { ok: true };
    try {
      const res = await this.quota(after).reserve(request(after, after.generation, false, hold));
      if (res.ok) this.reserved.set(after.spec.id, { planned: after, at: Date.now() });
      return res;
    } catch (err) {
      return { ok: false, error: unavailable(after, err, "pause") };
    }
  }

  /**
   * The pause reserved for sandbox `id` and not settled yet (`afterPause`), if still fresh; with
   * `as`, only when it is that very hold at that generation. Fresh: well inside the quota's 60 s
   * grace, after which its reconcile may have reverted a reservation its group has not reached.
   */
  reservedPause(id: string, as?: SandboxState): SandboxState | null {
    const r = this.reserved.get(id);
    if (!r || Date.now() - r.at > RESERVED_FRESH_MS) return null;
    if (as && (as.generation !== r.planned.generation || held(as) !== held(r.planned))) return null;
    return r.planned;
  }

  /**
   * After a pause reserved by `beforePause(planned)` was applied, or not: when the sandbox (`now`)
   * is not what was reserved, the reservation goes back to what it holds (TeamQuotaDO.revert). Best
   * effort: a lost one is the reconcile's, as before.
   */
  async afterPause(planned: SandboxState, now: SandboxState | null): Promise<void> {
    if (this.reserved.get(planned.spec.id)?.planned.generation === planned.generation) this.reserved.delete(planned.spec.id);
    if (now && now.generation === planned.generation && held(now) === held(planned)) return;
    try {
      await this.quota(planned).revert(planned.spec.id, planned.generation, held(now), now?.generation ?? planned.generation);
    } catch (err) {
      LOG.error("team quota revert of an unapplied pause failed; the quota's reconcile will find it", { sandboxId: planned.spec.id, error: err });
    }
  }

  /**
   * After a committed transition from `before` to `after`. The create was reserved by its claim.
   * Resolves after the first try, so a client's kill or pause has freed its slot when it is
   * answered (a create right after it is not refused); failed tries go on in the background.
   */
  follow(before: SandboxState | null, after: SandboxState | null, ev: SandboxEvent["type"]): Promise<void> | null {
    const was = held(before);
    const now = held(after);
    if (was === now || (!was && ev === "create")) return null;
    // A pause reserved before it was applied (beforePause): the quota holds exactly this already.
    if (after && this.reservedPause(after.spec.id, after)) return null;
    const s = (after ?? before)!;
    const generation = after?.generation ?? before!.generation;
    const send = now ? () => this.quota(s).reserve(request(s, generation, true, now === "running" ? undefined : now)) : () => this.quota(s).release(s.spec.id, generation);
    const what = `${now ? "assert" : "release"} of sandbox ${s.spec.id}`;
    return attempt(send).then((done) => {
      if (!done) this.background(retry(send, what));
    });
  }

  private quota(s: SandboxState) {
    return this.env.TEAM_QUOTA.get(this.env.TEAM_QUOTA.idFromName(s.spec.teamId));
  }
}

/** What the sandbox holds against its team's quota (ledger.ts `holds`). */
export function held(s: SandboxState | null): Hold {
  return s ? holds(s.phase, s.pauseStrategy) : null;
}

function request(s: SandboxState, generation: number, force: boolean, paused?: Kept) {
  return { sandboxId: s.spec.id, generation, cpu: s.spec.cpuCount, memoryMB: s.spec.memoryMB, teamId: s.spec.teamId, teamName: s.spec.teamName ?? s.spec.teamId, force, ...(paused ? { paused } : {}) };
}

function unavailable(s: SandboxState, err: unknown, what: "pause" | "resume"): Refusal {
  return { code: ErrorCode.quotaUnavailable, message: `The quota of team "${s.spec.teamName ?? s.spec.teamId}" is unavailable (${String(err)}); the ${what} is refused` };
}

/** One try; false when it failed or was refused. */
async function attempt(send: () => Promise<Result>): Promise<boolean> {
  try {
    return (await send()).ok;
  } catch {
    return false;
  }
}

async function retry(send: () => Promise<Result>, what: string): Promise<void> {
  for (const ms of RETRIES_MS) {
    await new Promise((r) => setTimeout(r, ms));
    if (await attempt(send)) return;
  }
  LOG.error("team quota call failed; the quota's reconcile will find it", { what, attempts: RETRIES_MS.length + 1 });
}
