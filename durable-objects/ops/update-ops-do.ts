// UpdateOpsDO: one SandboxUpdateOps run (`idFromName(teamId/name)`, ops/stub.ts). A thin shell
// around machine.ts: it stores the run (store.ts), selects the candidates once (the team's
// listed sandboxes from the libSQL index, their facts from their groups, each template's current
// revision from the store), and while members are in flight its alarm asks their groups to start
// or report each upgrade (SandboxGroupDO.upgradeBatch, idempotent by revision and attempt).
//
// Nothing is done twice and nothing skipped across a restart of the edge or the agent: a member
// is marked Updating with its attempt, and stored, before any group is asked; the group applies a
// (revision, attempt) once and answers where it stands however often it is asked; the member
// leaves Updating only on the group's answer. Every RPC resolves to a typed result.
import { DurableObject } from "cloudflare:workers";
import type { Env } from "../env.ts";
import { ErrorCode } from "../../schema/errors.ts";
import type { UpdateOpsSpec } from "../../schema/api/update-ops.ts";
import type { TemplateSpec } from "../../schema/protocol/index.ts";
import { protocolTemplate } from "../pool/member-intent.ts";
import { bySandboxGroup, sandboxGroupStub } from "../sandbox/stub.ts";
import type { OpsCandidate, UpgradeOutcome, UpgradeRequest } from "../sandbox/upgrade.ts";
import type { Result, SandboxNote } from "../sandbox/state.ts";
import { getDb } from "../store/db.ts";
import { listLiveIdsOfTeam } from "../store/sandbox-index.ts";
import { resolveTemplate } from "../store/templates.ts";
import { writeOpsRunSummary } from "../store/update-ops-runs.ts";
import { active, checkpointDue, counts, freeDue, nextFreeAt, restoringMembers, snapshotsFreedOnDelete, hookDue, inFlight, initialState, newEvents, transition, type OpsInput, type OpsMember, type OpsState } from "./machine.ts";
import type { Hook } from "../../schema/api/hooks.ts";
import { runUpgradeHook } from "../operations/pause-resume.ts";
import { createSnapshot, deleteSnapshot } from "../operations/snapshots.ts";
import type { Caller } from "../env.ts";
import { OpsStore, type LeftSnapshot, type Stored } from "./store.ts";
import { deleteFailed, leftDue, nextLeftAt, stillNeeded, woken } from "./left.ts";
import { annotateSpan, currentTraceparent, edgeSpan, flushEdgeTraces } from "../tracing/edge-tracing.ts";

const HOOK_REASONS = new Set(["PreUpgradeHook", "PostUpgradeHook"]);

/** How often a run in flight asks its sandboxes' groups. */
const POLL_MS = 500;

/** A run as the admin API and the CRD's `.status` show it. */
export interface OpsView extends ReturnType<typeof counts> {
  name: string;
  phase: OpsState["phase"];
  spec: UpdateOpsSpec;
  conditions: OpsState["conditions"];
  /** Per-sandbox status lines. */
  sandboxes: { id: string; status: string; from: string; to: string; paused: boolean; attempt: number; message?: string }[];
  events: OpsState["events"];
  createdAt: number;
  updatedAt: number;
}

export interface StartOps {
  name: string;
  teamId: string;
  spec: UpdateOpsSpec;
  /** The caller's trace (when traced): the run's alarm steps are spans of it. */
  traceparent?: string;
}

export type OpsResult = Result<{ ops: OpsView; created?: boolean }>;

export class UpdateOpsDO extends DurableObject<Env> {
  private readonly store = new OpsStore(this.ctx.storage.sql);
  private run: Stored | null | undefined;
  /** RPCs and the alarm take turns: each reads, steps and stores the run whole. */
  private queue: Promise<unknown> = Promise.resolve();
  /** Hooks and checkpoints running now (`member/attempt/stage`), so a poll does not start one twice. */
  private readonly hooksRunning = new Set<string>();

  /** Creates the run, or (same name again, e.g. a repeated kubectl apply) applies what may change. */
  async start(input: StartOps): Promise<OpsResult> {
    return this.locked(async () => {
      const run = this.load();
      if (run) {
        const was = run.state.spec;
        if (JSON.stringify(was.selector) !== JSON.stringify(input.spec.selector) || was.updateStrategy.type !== input.spec.updateStrategy.type || JSON.stringify(was.stateFilter) !== JSON.stringify(input.spec.stateFilter)) {
          return refuse(ErrorCode.conflict, `update ops "${input.name}" exists; its selector, stateFilter and strategy type cannot change`);
        }
        return this.step({ type: "change", paused: input.spec.paused, maxUnavailable: input.spec.updateStrategy.maxUnavailable });
      }
      this.run = { state: initialState(input.name, input.teamId, input.spec, Date.now()), targets: {}, ...(input.traceparent ? { traceparent: input.traceparent } : {}) };
      this.store.save(this.run);
      await this.ctx.storage.setAlarm(Date.now());
      return { ok: true, ops: view(this.run.state), created: true };
    });
  }

  async change(ch: { paused?: boolean; maxUnavailable?: number | string }): Promise<OpsResult> {
    return this.locked(() => this.step({ type: "change", ...ch }));
  }

  /** Retries the failed members (a Failed run carries on). */
  async resume(): Promise<OpsResult> {
    return this.locked(() => this.step({ type: "resume" }));
  }

  async status(): Promise<OpsResult> {
    return this.locked(async () => {
      const run = this.load();
      return run ? { ok: true, ops: view(run.state) } : notFound();
    });
  }

  /** Forgets the run, and deletes the checkpoint snapshots it still holds (failed members', and
   * those it was freeing); upgrades under way finish on their own and nothing new starts. The
   * snapshots those upgrades restore from are not pulled from under them: they are left (`left`)
   * and freed once each upgrade has ended, whichever way (`freeLeft`). */
  async remove(): Promise<Result> {
    return this.locked(async () => {
      const run = this.load();
      if (!run) return notFound();
      const caller = opsCaller(run.state.teamId);
      const left = restoringMembers(run.state).map((m) => ({ upgrade: upgradeRequest(run, m) as LeftSnapshot["upgrade"], attempts: 0 }));
      if (left.length) console.warn(`update ops ${run.state.name}: deleted mid-upgrade; checkpoint snapshots ${left.map((l) => l.upgrade.restoreFs).join(", ")} kept until their upgrades end`);
      await Promise.all(snapshotsFreedOnDelete(run.state).map((id) => deleteSnapshot(this.env, caller, id).catch((err: unknown) => console.warn(`update ops ${run.state.name}: snapshot ${id} not deleted`, err))));
      this.store.clear();
      for (const l of left) this.store.leaveSnapshot(l);
      this.run = null;
      // Before the caller removes the row: no summary write lands after it.
      await this.summaryWrites;
      const leftNext = this.leftNext();
      if (leftNext !== undefined) await this.ctx.storage.setAlarm(leftNext);
      else await this.ctx.storage.deleteAlarm();
      return { ok: true };
    });
  }

  /** Frees each snapshot the run holds past its members' upgrades (left by a deleted run, or kept
   * for a paused member's restore on resume) once its sandbox no longer needs it restored
   * (`SandboxGroupDO.restoresNeeded`, which starts nothing: the upgrade ended whichever way and owes
   * no restore, nor carried one forward, or the sandbox is gone). One still needed is asked about
   * again backing off (left.ts), sooner when its group wakes this object (`restoreSettled`); a
   * delete that keeps failing is given up on after MAX_FREE_ATTEMPTS tries (logged). */
  private async freeLeft(): Promise<void> {
    const now = Date.now();
    const due = this.store.leftSnapshots().filter((l) => leftDue(l, now));
    if (!due.length) return;
    const answers = await Promise.all(
      bySandboxGroup(due, (l) => l.upgrade.id).map((ls) => sandboxGroupStub(this.env, ls[0]!.upgrade.id).restoresNeeded(ls.map((l) => ({ id: l.upgrade.id, teamId: l.upgrade.teamId, snapshotId: l.upgrade.restoreFs })))),
    );
    const needed = new Set(answers.flat());
    for (const l of due) {
      const snapshotId = l.upgrade.restoreFs;
      if (needed.has(snapshotId)) {
        this.store.leaveSnapshot(stillNeeded(l, now));
        continue;
      }
      const r = await deleteSnapshot(this.env, opsCaller(l.upgrade.teamId), snapshotId).catch((err: unknown) => ({ ok: false as const, error: { message: String(err) } }));
      const retry = r.ok ? null : deleteFailed(l, Date.now());
      if (!r.ok && !retry) console.warn(`update ops: snapshot ${snapshotId} held past its run's need not deleted, given up: ${r.error.message}`);
      if (retry) this.store.leaveSnapshot(retry);
      else this.store.forgetSnapshot(snapshotId);
    }
  }

  /** The group of a sandbox whose restore this object may hold a snapshot for says the restore is
   * no longer owed (restored, carried on, or the sandbox gone): look at the held snapshots now. */
  async restoreSettled(snapshotId: string): Promise<void> {
    await this.locked(async () => {
      const l = this.store.leftSnapshots().find((x) => x.upgrade.restoreFs === snapshotId);
      if (!l) return;
      this.store.leaveSnapshot(woken(l));
      await this.ctx.storage.setAlarm(Date.now());
    });
  }

  override async alarm(): Promise<void> {
    await this.locked(async () => {
      await this.freeLeft().catch((err: unknown) => console.error("update ops: freeing left snapshots failed", err));
      const leftNext = this.leftNext();
      const run = this.load();
      if (!run || !active(run.state)) {
        if (leftNext) await this.ctx.storage.setAlarm(leftNext);
        return;
      }
      const attributes = { "team.id": run.state.teamId, "ops.name": run.state.name, "ops.phase": run.state.phase };
      try {
        await edgeSpan(this.env, "UpdateOpsDO.alarm", attributes, async () => {
          if (run.state.phase === "Pending") await edgeSpan(this.env, "UpdateOpsDO.select", {}, () => this.select(run));
          this.startFreeing();
          // Twice: members the first answers let start are started in the same alarm.
          for (let i = 0; i < 2 && this.run && inFlight(this.run.state).length > 0; i++) {
            const members = inFlight(this.run.state).length;
            await edgeSpan(this.env, "UpdateOpsDO.poll", { "ops.in_flight": members }, () => this.poll(this.run!));
          }
        }, run.traceparent);
      } catch (err) {
        console.error(`update ops ${run.state.name}: step failed`, err);
      } finally {
        const flushing = flushEdgeTraces();
        if (flushing) this.ctx.waitUntil(flushing);
      }
      // The run may have left snapshots just now (members upgraded paused).
      const next = Math.min(this.run && active(this.run.state) ? this.wakeAt(this.run.state) : Infinity, this.leftNext() ?? Infinity);
      if (next !== Infinity) await this.ctx.storage.setAlarm(next);
    });
  }

  /** When the held snapshots are next looked at (none held: undefined); not before the next
   * LEFT_FIRST_CHECK_MS, so a failing group is not asked in a loop. */
  private leftNext(): number | undefined {
    const at = nextLeftAt(this.store.leftSnapshots());
    return at === undefined ? undefined : Math.max(at, Date.now() + 100);
  }

  /** Soon while members are in flight; else when the next snapshot delete is due (backing off). */
  private wakeAt(s: OpsState): number {
    const poll = Date.now() + POLL_MS;
    if (s.phase === "Pending" || (s.phase === "Updating" && inFlight(s).length > 0)) return poll;
    return Math.max(poll, nextFreeAt(s) ?? poll);
  }

  /** The team's listed sandboxes, their facts from their groups, each template's current revision. */
  private async select(run: Stored): Promise<void> {
    const db = getDb(this.env);
    const teamId = run.state.teamId;
    const groups = bySandboxGroup(await listLiveIdsOfTeam(db, teamId), (id) => id);
    const found = await Promise.all(groups.map((ids) => sandboxGroupStub(this.env, ids[0]!).opsCandidates(teamId, ids)));
    const candidates: OpsCandidate[] = found.flat();
    const targets: Record<string, TemplateSpec> = {};
    const revisions: Record<string, string | null> = {};
    for (const templateId of new Set(candidates.map((c) => c.templateId))) {
      const rec = await resolveTemplate(db, teamId, templateId);
      revisions[templateId] = rec?.revision ?? null;
      if (rec) targets[templateId] = protocolTemplate(templateId, rec.revision, rec.spec);
    }
    this.save({ ...run, state: transition(run.state, { type: "select", candidates, targets: revisions }, Date.now()), targets });
  }

  /**
   * Asks the groups of the members in flight to start or report their upgrades. A running member's
   * preUpgrade hook runs before its group is first asked, its postUpgrade once the group reports it
   * upgraded (before it counts as Succeeded); each once per attempt, stored before the next step.
   * A paused member runs neither (nothing of it runs to run them in). Hooks run beside the run, not
   * under its lock (`startHooks`): a member whose hook is running is not asked meanwhile, the others
   * go on, and status reads answer.
   */
  private async poll(run: Stored): Promise<void> {
    const lifecycle = run.state.spec.lifecycle;
    const state = this.run!.state;
    const members = inFlight(state);
    this.startHooks("pre", members.filter((m) => !m.paused && hookDue(m, "pre")), lifecycle?.preUpgrade);
    const hooked = members.filter((m) => m.paused || !hookDue(m, "pre"));
    // CheckpointRestore: each member's snapshot before its recreate (after its preUpgrade).
    this.startCheckpoints(hooked.filter((m) => checkpointDue(state, m)));
    const asked = hooked.filter((m) => !checkpointDue(state, m));
    const groups = bySandboxGroup(asked.map((m) => upgradeRequest(run, m)), (req) => req.id);
    // Each group's call is a span of the run's trace; the upgrades' intents (and the agent's
    // reconcile and driver steps for them) are its children.
    const answers = await Promise.all(
      groups.map((items) =>
        edgeSpan(this.env, "SandboxGroupDO.upgradeBatch", { "ops.members": items.length }, () => {
          const traceparent = currentTraceparent();
          return sandboxGroupStub(this.env, items[0]!.id).upgradeBatch(traceparent ? items.map((it) => ({ ...it, traceparent })) : items);
        }),
      ),
    );
    const outcomes: Record<string, UpgradeOutcome> = Object.assign({}, ...answers);
    // Upgraded, its postUpgrade still to run: it stays Updating until the hook has passed.
    const post = asked.filter((m) => outcomes[m.id]?.status === "succeeded" && !m.paused && hookDue(m, "post"));
    this.startHooks("post", post, lifecycle?.postUpgrade);
    for (const m of post) delete outcomes[m.id];
    // Upgraded paused, restored when it resumes: its snapshot outlives the run's need of it, and
    // is freed as a deleted run's are, once the group no longer reports the restore pending.
    for (const m of asked.filter((x) => outcomes[x.id]?.status === "succeeded" && outcomes[x.id]?.restorePending)) {
      const req = upgradeRequest(run, m);
      if (req.restoreFs) this.store.leaveSnapshot({ upgrade: req as LeftSnapshot["upgrade"], attempts: 0 });
    }
    this.save({ ...this.run!, state: transition(this.run!.state, { type: "progress", outcomes }, Date.now()) });
  }

  /** Starts hook `stage` of each member not already running it for this attempt; it ends on its own. */
  private startHooks(stage: "pre" | "post", members: OpsMember[], given: Hook | undefined): void {
    const teamId = this.run!.state.teamId;
    for (const m of members) {
      const key = `${m.id}/${m.attempt}/${stage}`;
      if (this.hooksRunning.has(key)) continue;
      this.hooksRunning.add(key);
      this.ctx.waitUntil(this.runHook(teamId, m.id, m.attempt, stage, given).finally(() => this.hooksRunning.delete(key)));
    }
  }

  /** Takes each member's checkpoint (a snapshot of its files, as E2B createSnapshot takes one: the
   * team sees it and can make sandboxes of it) beside the run, as hooks run; records it under the
   * lock. A driver that cannot take snapshots fails the member with its reason. */
  private startCheckpoints(members: OpsMember[]): void {
    const teamId = this.run!.state.teamId;
    for (const m of members) {
      const key = `${m.id}/${m.attempt}/checkpoint`;
      if (this.hooksRunning.has(key)) continue;
      this.hooksRunning.add(key);
      const caller = opsCaller(teamId);
      const attributes = { "sandbox.id": m.id, "ops.attempt": m.attempt };
      const taken = this.traced("UpdateOpsDO.checkpoint", attributes, () => createSnapshot(this.env, caller, m.id, {})).then(
        (r) => (r.ok ? { snapshotId: r.snapshot.id } : { error: r.error.message }),
        (err: unknown) => ({ error: String(err) }),
      );
      const done = taken.then((r) =>
        this.locked(async () => {
          const run = this.load();
          if (!run) return;
          this.save({ ...run, state: transition(run.state, { type: "checkpointed", id: m.id, attempt: m.attempt, ...r }, Date.now()) });
          if (active(this.run!.state)) await this.ctx.storage.setAlarm(Date.now());
        }),
      );
      this.ctx.waitUntil(done.finally(() => this.hooksRunning.delete(key)));
    }
  }

  /** Deletes the snapshots the run no longer needs (its members restored), beside the run as
   * checkpoints are taken; records them `freed` under the lock. One that fails is recorded
   * `freeFailed`: tried again later, backing off, then given up on (the machine's bound). */
  private startFreeing(): void {
    const run = this.run;
    if (!run) return;
    const caller = opsCaller(run.state.teamId);
    for (const { snapshotId } of freeDue(run.state, Date.now())) {
      const key = `free/${snapshotId}`;
      if (this.hooksRunning.has(key)) continue;
      this.hooksRunning.add(key);
      const done = deleteSnapshot(this.env, caller, snapshotId)
        .then(
          (r): OpsInput => (r.ok ? { type: "freed", snapshotIds: [snapshotId] } : { type: "freeFailed", snapshotId, error: r.error.message }),
          (err: unknown): OpsInput => ({ type: "freeFailed", snapshotId, error: String(err) }),
        )
        .then((ev) => {
          if (ev.type === "freeFailed") console.warn(`update ops ${run.state.name}: snapshot ${snapshotId} not deleted: ${ev.error}`);
          return this.locked(async () => {
            const now = this.load();
            if (now) this.save({ ...now, state: transition(now.state, ev, Date.now()) });
          });
        });
      this.ctx.waitUntil(done.catch((err: unknown) => console.warn(`update ops: snapshot ${snapshotId} not recorded`, err)).finally(() => this.hooksRunning.delete(key)));
    }
  }

  /** Runs one member's hook outside the lock, then records its verdict under it and wakes the run.
   * A hook that could not be run at all (an RPC failed) is recorded nowhere: the next poll runs it. */
  private async runHook(teamId: string, id: string, attempt: number, stage: "pre" | "post", given: Hook | undefined): Promise<void> {
    const name = stage === "pre" ? "preUpgrade" : "postUpgrade";
    let v: Awaited<ReturnType<typeof runUpgradeHook>>;
    try {
      v = await this.traced(`UpdateOpsDO.${name}`, { "sandbox.id": id, "ops.attempt": attempt }, async () => {
        const verdict = await runUpgradeHook(this.env, teamId, id, name, given);
        annotateSpan(verdict ? { "hook.reason": verdict.condition.reason, "hook.proceed": verdict.proceed } : { "hook.reason": "None" });
        return verdict;
      });
    } catch (err) {
      console.error(`update ops: ${name} of ${id}: not run`, err);
      return;
    }
    // No hook: nothing to run for this attempt.
    const ev = v ? { proceed: v.proceed, reason: v.condition.reason, message: v.condition.message } : { proceed: true, reason: "None", message: "no hook", none: true as const };
    await this.locked(async () => {
      const run = this.load();
      if (!run) return;
      this.save({ ...run, state: transition(run.state, { type: "hooked", id, attempt, stage, ...ev }, Date.now()) });
      if (active(this.run!.state)) await this.ctx.storage.setAlarm(Date.now());
    });
  }

  /** Work beside the run (a hook, a checkpoint) as a span of the step that started it, exported
   * when it ends (the alarm that started it has flushed already). */
  private async traced<T>(name: string, attributes: Record<string, string | number>, work: () => Promise<T>): Promise<T> {
    try {
      return await edgeSpan(this.env, name, attributes, work);
    } finally {
      const flushing = flushEdgeTraces();
      if (flushing) this.ctx.waitUntil(flushing);
    }
  }

  private async step(ev: OpsInput): Promise<OpsResult> {
    const run = this.load();
    if (!run) return notFound();
    this.save({ ...run, state: transition(run.state, ev, Date.now()) });
    if (active(this.run!.state)) await this.ctx.storage.setAlarm(Date.now());
    return { ok: true, ops: view(this.run!.state) };
  }

  private load(): Stored | null {
    if (this.run === undefined) this.run = this.store.load();
    return this.run;
  }

  private save(run: Stored): void {
    const before = this.run?.state;
    this.store.save(run);
    this.run = run;
    this.writeSummary(run.state);
    // An upgrade hook's run is recorded on the sandbox by the hook itself (recordHook): not twice.
    this.recordOnSandboxes(newEvents(before, run.state).filter((e) => e.sandboxId && !HOOK_REASONS.has(e.reason)));
  }

  private eventWrites: Promise<void> = Promise.resolve();

  /**
   * Each new run event naming a sandbox is also kept on that sandbox's own event list (its group's
   * `recordEvents`), so a team without Kubernetes sees the run's steps per sandbox (admin API,
   * console timeline) as `kubectl describe sbx` shows them on Kubernetes. In order, beside the
   * run; best effort: a failed write is logged, the run's own events keep every step.
   */
  private recordOnSandboxes(events: OpsState["events"]): void {
    if (!events.length) return;
    const { teamId, name } = this.run!.state;
    const source = `SandboxUpdateOps ${name}`;
    const bySandbox = new Map<string, { id: string; teamId: string; notes: SandboxNote[] }>();
    for (const e of events) {
      const id = e.sandboxId!;
      const item = bySandbox.get(id) ?? bySandbox.set(id, { id, teamId, notes: [] }).get(id)!;
      item.notes.push({ at: e.at, type: e.type, reason: e.reason, message: e.message, source });
    }
    const groups = bySandboxGroup(bySandbox.values(), (item) => item.id);
    this.eventWrites = this.eventWrites.then(() =>
      Promise.all(groups.map((items) => sandboxGroupStub(this.env, items[0]!.id).recordEvents(items))).then(
        () => undefined,
        (err: unknown) => console.warn(`update ops ${name}: events not recorded on their sandboxes`, err),
      ),
    );
    this.ctx.waitUntil(this.eventWrites);
  }

  /** The summary last written to the run's libSQL row ("" none yet). */
  private summaryWritten = "";
  private summaryWrites: Promise<void> = Promise.resolve();

  /**
   * Rewrites the run's libSQL row (the console's list) when its phase or counts changed: one
   * write per change, in order. A failed write is tried again at the next save.
   */
  private writeSummary(s: OpsState): void {
    const { replicas, updatedReplicas, failedReplicas } = counts(s);
    const summary = { phase: s.phase, replicas, updatedReplicas, failedReplicas };
    const key = JSON.stringify(summary);
    if (key === this.summaryWritten) return;
    this.summaryWritten = key;
    const { teamId, name, createdAt } = s;
    this.summaryWrites = this.summaryWrites.then(() =>
      writeOpsRunSummary(getDb(this.env), teamId, name, createdAt, summary).catch((err: unknown) => {
        if (this.summaryWritten === key) this.summaryWritten = "";
        console.warn(`update ops ${name}: summary not written`, err);
      }),
    );
    this.ctx.waitUntil(this.summaryWrites);
  }

  private locked<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.queue.then(fn, fn);
    this.queue = next.catch(() => undefined);
    return next;
  }
}

/** Who the run acts as on its team's snapshots. */
/** What a member's group is asked: its target, attempt, and (CheckpointRestore) the snapshot of
 * this attempt to restore from. */
function upgradeRequest(run: Stored, m: OpsMember): UpgradeRequest {
  const restoreFs = m.checkpoint?.attempt === m.attempt ? m.checkpoint.snapshotId : undefined;
  return { id: m.id, teamId: run.state.teamId, template: run.targets[m.templateId]!, attempt: m.attempt, by: run.state.name, ...(restoreFs ? { restoreFs, holder: run.state.name } : {}) };
}

function opsCaller(teamId: string): Caller {
  return { keyId: "update-ops", teamId, teamName: "", admin: true };
}

function view(s: OpsState): OpsView {
  return {
    name: s.name,
    phase: s.phase,
    spec: s.spec,
    ...counts(s),
    conditions: s.conditions,
    sandboxes: s.members.map((m) => ({ id: m.id, status: m.status, from: m.from, to: m.to, paused: m.paused, attempt: m.attempt, ...(m.message ? { message: m.message } : {}) })),
    events: s.events,
    createdAt: s.createdAt,
    updatedAt: s.updatedAt,
  };
}

function refuse(code: (typeof ErrorCode)[keyof typeof ErrorCode], message: string): { ok: false; error: { code: typeof code; message: string } } {
  return { ok: false, error: { code, message } };
}

function notFound() {
  return refuse(ErrorCode.notFound, "update ops not found");
}
