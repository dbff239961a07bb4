// The template builder of the local driver: runs the builds the edge hands the agent (schema/
// protocol/build.ts), each step in a build sandbox (sandbox.ts) over the layers below it, and
// publishes the result in the RootfsStore as layers plus a template the edge then names in the
// template's `spec.image`. Steps whose key (plan.ts) already has a layer are not run again.
import { rmSync, statfsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { clipText, MAX_MESSAGE_LENGTH } from "../../../../schema/api/limits.ts";
import { BUILD_SILENCE_MS, MAX_BUILD_LOG_ENTRIES } from "../../../../schema/api/template-build.ts";
import { FRAME_MAX_BYTES, jsonBytes } from "../../../../schema/protocol/batches.ts";
import { configProblem, type BuildEvents, type BuildFrame, type BuildLog, type BuildResult } from "../../../../schema/protocol/build.ts";
import type { RootfsStore } from "../rootfs/store.ts";
import { cgroupSetFor, createCgroups, killAndRemove, procsFiles, removeParents, type CgroupLayout } from "../cgroups.ts";
import { describeStep, layerIdOf, planSteps, rootfsForImage, type PlannedStep } from "./plan.ts";
import { HOST_RESERVE_FILES, HOST_RESERVE_MB, runStep, stepDiskMB, stepFiles, type SandboxStep } from "./sandbox.ts";
import { treeSize } from "../rootfs/tree-size.ts";
import { MIN_DISK_MB } from "../disk.ts";
import { seccompProgram } from "../seccomp.ts";
import { BuildJournal, removeDeadStaging } from "./journal.ts";
import { claimStep } from "./step-claim.ts";
import { removeTree } from "../remove-tree.ts";
import type { StepNet } from "./step-net.ts";
import type { IdRange, UidRanges } from "../uid-range.ts";
import type { CacheBound } from "./retire.ts";

export interface BuilderOptions {
  store: RootfsStore;
  /** Where each step gets a cgroup with the build's CPU, memory and pids limits (none: unlimited). */
  cgroups?: CgroupLayout;
  /** Fetches a copy step's archive from the edge (`filesPath` + hash, with the cluster token). */
  fetchFile(path: string): Promise<Uint8Array>;
  /** Sends events: "ack" when the edge acks the results in them once stored (`acked`: the builder
   * keeps each until then and sends it again), true when it does not (an older edge: a result that
   * left is forgotten), false when the link is down (they are sent with the next batch). */
  send(items: BuildEvents["items"]): boolean | "ack";
  log?: (msg: string, fields?: Record<string, unknown>) => void;
  /** Longest one step may run. */
  stepTimeoutMs?: number;
  /** How often log lines leave in one frame. */
  flushMs?: number;
  /** How long a result sent to an edge that acks results waits for the ack before it goes again
   * on the same session; by default RESULT_RESEND_MS. */
  resultResendMs?: number;
  /** How long a build's result is kept for an edge that has not acked it; by default RESULT_KEEP_MS. */
  resultKeepMs?: number;
  /** Where unfinished builds are kept, so a restarted agent resumes them (none: not kept). */
  journalDir?: string;
  /** Opens a step's network (LocalDriver.stepNetwork); none, or undefined from it: loopback only. */
  network?: (stagingDir: string) => Promise<StepNet> | undefined;
  /** The most the layers one build makes may hold, in MiB: each step writes onto a disk image of
   * what is left (sandbox.ts `diskMB`), so a step that fills it fails with ENOSPC instead of
   * filling the host's disk. None (the host cannot loop-mount ext4 images: disk.ts `probeDisk`):
   * unbounded. */
  buildDiskMB?: number;
  /** The most files (inodes: files, directories, links, nodes, whiteouts) the layers one build
   * makes may hold; by default BUILD_FILES. Bytes alone left empty files free: a build could make
   * millions on the host's file system for a few MiB of its disk bound. Each step's disk is made
   * with what is left (mkfs -N: ENOSPC inside past it), and a layer that holds more (ext4 rounds
   * the count up; a step without a disk) fails the step before it is published. */
  buildFiles?: number;
  /** Where each step's user namespace gets its uid range (LocalDriver.stepUids: the sandboxes'
   * allocator), or why steps run as the host's root (every build's log says so). None: as the
   * host's root, unsaid (tests of the builder's bookkeeping). */
  uids?: UidRanges | string;
  /** Called when a build ended, ready or not, with its team: the agent holds the team's layer
   * cache to CACHE_BOUND then (retire.ts `trim`). */
  onBuildEnd?: (teamId: string) => void;
}

/** Processes one step may have at once. */
const STEP_PIDS = 4096;
/** The build's disk bound when the agent's options name none (sandbox disks default to 1 GiB). */
export const BUILD_DISK_MB = 16 * 1024;
/** The build's file bound when the agent's options name none: `base` is ~38k files, the
 * code-interpreter template's step ~42k. */
export const BUILD_FILES = 512 * 1024;
/** What each team's layers that nothing uses may hold (retire.ts CacheBound: why one build's bounds). */
export const CACHE_BOUND: CacheBound = { bytes: BUILD_DISK_MB * 1024 * 1024, files: BUILD_FILES };
/** Fewest files a step is started with (an empty layer and a few writes). */
const MIN_STEP_FILES = 1024;
/** A build silent this long sends an empty frame: the edge fails a build it has not heard from in
 * BUILD_SILENCE_MS (30 min), which a quiet step (or the copy of a large layer) could otherwise pass
 * while it still runs here, freeing its slot and quota on the edge. */
const HEARTBEAT_MS = 5 * 60_000;
/** Refused sends of one build's events before it is given up (its result replaced by an error
 * in between, so a result the link refuses still ends the build on the edge): it is stopped (its
 * step killed, its staging removed) and ends with GIVEN_UP, a result no link refuses. */
const SEND_FAILURES = 3;
const GIVEN_UP = "the build's events could not be sent to the edge (see the agent's log): it was stopped";
/** A result sent to an edge that acks results and not acked in this long is sent again (the edge's
 * store failed meanwhile); a new session sends it at once (`relinked`). */
export const RESULT_RESEND_MS = 30_000;
/** A result not acked this long after the build ended is dropped, with a log line: by then the edge
 * has failed the build for its silence (BUILD_SILENCE_MS) unless it stored the result, so
 * an edge that never acks (a bug) or whose writes always throw for it cannot keep it here, in the
 * journal and on the wire every RESULT_RESEND_MS, for ever. Counted across agent restarts (the
 * journal keeps when it ended). */
export const RESULT_KEEP_MS = 2 * BUILD_SILENCE_MS;
/** Longest one step may run unless the options say otherwise. */
const STEP_TIMEOUT_MS = 30 * 60_000;

/** The store's file system's counts; undefined where it cannot be read (no layers directory yet:
 * a store nothing was built in, in a test of the builder's bookkeeping). */
function hostFs(dir: string): { bavail: number; bsize: number; files: number; ffree: number } | undefined {
  try {
    return statfsSync(dir);
  } catch {
    return undefined;
  }
}

function exitText(code: number | null, memoryMB: number): string {
  if (code === null) return "killed (timeout)";
  // 137 = SIGKILL: in a step with a memory limit, almost always the OOM killer.
  if (code === 137) return `exit code 137 (killed; the build has ${memoryMB} MiB of memory)`;
  return `exit code ${code}`;
}

class StepFailed extends Error {
  readonly step: string;
  constructor(message: string, step: string) {
    super(message);
    this.step = step;
  }
}

/** One build's outgoing events: numbered, bounded, batched. */
class Events {
  seq = 0;
  pending: BuildLog[] = [];
  /** When its last frame left: a build that prints nothing still says it lives (HEARTBEAT_MS). */
  sentAt = Date.now();
  result: BuildResult | undefined;
  /** When its result last left for an edge that acks results, until the ack (0: due again). */
  unacked: number | undefined;
  /** When it ended (its result was reached, or read back from the journal): RESULT_KEEP_MS. */
  endedAt: number | undefined;
  /** Frames with this build's events the link refused (TemplateBuilder #unsent). */
  sendFailures = 0;
  /** Given up (#unsent): no more lines, and its end is GIVEN_UP once its run stopped. */
  givenUp = false;
  /** Its run (steps, claim wait, the copy of a layer) ended: settled, or there was none (resumed
   * with its result from the journal). */
  settled = false;
  /** Stops its run: the same path as the step timeout (the step killed, its cgroup and staging removed). */
  readonly stop = new AbortController();
  readonly buildId: string;
  constructor(buildId: string) {
    this.buildId = buildId;
  }
  add(message: string, level: BuildLog["level"] = "info", step?: string): void {
    if (this.seq >= MAX_BUILD_LOG_ENTRIES || this.givenUp) return;
    const last = this.seq === MAX_BUILD_LOG_ENTRIES - 1;
    this.pending.push({ seq: this.seq++, at: Date.now(), level: last ? "warn" : level, message: last ? "… more output was cut" : clipText(message, MAX_MESSAGE_LENGTH), ...(step ? { step } : {}) });
  }
}

export class TemplateBuilder {
  readonly #o: BuilderOptions;
  /** The sandboxes' seccomp filter, for every step too (seccomp.ts); undefined: turned off. */
  readonly #seccomp = seccompProgram();
  readonly #builds = new Map<string, Events>();
  readonly #frames = new Map<string, BuildFrame>();
  /** Per running build, the layers it stands on or is about to take from the cache: not yet in
   * any template record, so a retire sweep (retire.ts) must see them here. */
  readonly #held = new Map<string, Set<string>>();
  readonly #journal: BuildJournal | undefined;
  /** Ends every build's wait for another builder's step claim when the builder is disposed. */
  readonly #disposed = new AbortController();
  #timer: NodeJS.Timeout | undefined;
  /** Whether the last send went to an edge that acks results (BuilderOptions.send's "ack"). */
  #acks = false;

  constructor(opts: BuilderOptions) {
    this.#o = opts;
    this.#journal = opts.journalDir ? new BuildJournal(opts.journalDir) : undefined;
  }

  /**
   * Starts again every build a previous run of the agent was handed and did not finish (it died
   * or was stopped mid-build): its finished steps are cached layers, so it goes on from the step
   * that was cut, and the edge's build log says so. Returns how many.
   */
  resume(): number {
    if (!this.#journal) return 0;
    // Mounts and claims before the builds below start; the dead trees go meanwhile.
    void removeDeadStaging(join(this.#o.store.root, "layers")).catch((err: Error) => this.#o.log?.(`dead build staging: ${err.message}`));
    const entries = this.#journal.list((file, why) => this.#o.log?.(`build journal entry ${file} dropped: ${why}`));
    for (const { frame, seq, result, endedAt, givenUp } of entries) {
      // Given up before the restart (its run may not have stopped): it ends as it would have.
      const end = result ?? (givenUp ? { status: "error" as const, message: GIVEN_UP } : undefined);
      this.#o.log?.(end ? "sending a build's result again after an agent restart" : "resuming a build after an agent restart", { buildId: frame.buildId });
      this.start(frame, seq, end, endedAt);
    }
    return entries.length;
  }

  /** Starts a build in the background; its events leave through `send`. A repeat is ignored. A
   * resumed one (`resumeSeq`) goes on from its cached steps, or, if it had ended (`result`, not
   * acked before the restart), only sends its result again. */
  start(frame: BuildFrame, resumeSeq?: number, result?: BuildResult, endedAt?: number): void {
    if (this.#builds.has(frame.buildId)) return;
    const ev = new Events(frame.buildId);
    if (resumeSeq !== undefined) ev.seq = resumeSeq;
    this.#builds.set(frame.buildId, ev);
    this.#frames.set(frame.buildId, frame);
    this.#arm();
    if (result) {
      ev.settled = true;
      ev.result = result;
      ev.endedAt = endedAt ?? Date.now();
      return;
    }
    if (resumeSeq !== undefined) ev.add("The agent restarted during this build: resuming it (finished steps are cached)", "warn");
    this.#journalWrite(() => this.#journal?.put({ frame, seq: ev.seq - ev.pending.length }));
    void this.#run(frame, ev)
      .then(
        (r): BuildResult => r,
        (err: Error): BuildResult => {
          const step = err instanceof StepFailed ? err.step : undefined;
          ev.add(err.message, "error", step);
          return { status: "error", message: clipText(err.message, MAX_MESSAGE_LENGTH), ...(step ? { step } : {}) };
        },
      )
      .then((r) => {
        ev.settled = true;
        if (this.#builds.get(frame.buildId) !== ev) return; // forgotten meanwhile (#unsent)
        this.#ended(ev, ev.givenUp ? { status: "error", message: GIVEN_UP } : r);
        this.#flush();
      });
  }

  /** A build's end, kept in its journal entry until the edge has it (an edge that acks results):
   * a restart sends it again instead of running the build again. */
  #ended(ev: Events, result: BuildResult): void {
    ev.result = result;
    ev.endedAt ??= Date.now(); // a result replaced (#unsent) keeps the first end's time
    this.#keep(ev);
  }

  /** The builds whose results the edge stored (its `buildAcks`): forgotten, here and in the journal. */
  acked(buildIds: string[]): void {
    for (const id of buildIds) if (this.#builds.get(id)?.unacked !== undefined) this.#end(id);
    if (!this.#builds.size) this.stop();
  }

  /** A new session with the edge: results it has not acked go again now (the previous session may
   * have dropped before their acks, or before they arrived). */
  relinked(): void {
    for (const ev of this.#builds.values()) if (ev.unacked !== undefined) ev.unacked = 0;
    if (this.#builds.size) this.#arm();
  }

  /** The layers running builds hold (see #held): kept by a retire sweep. */
  layersHeld(): Set<string> {
    const out = new Set<string>();
    for (const ls of this.#held.values()) for (const l of ls) out.add(l);
    return out;
  }

  get active(): number {
    return this.#builds.size;
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** Stops and removes the builder's parent cgroups (steps' own are removed as each ends). */
  dispose(): void {
    this.#disposed.abort(new Error("the builder stopped (the agent is stopping) while this build waited for another build of the same step"));
    this.stop();
    if (this.#o.cgroups) removeParents(this.#o.cgroups);
  }

  #arm(): void {
    this.#timer ??= setInterval(() => this.#flush(), this.#o.flushMs ?? 250);
    this.#timer.unref();
  }

  #flush(): void {
    const items: BuildEvents["items"] = [];
    // Tenant output is up to 4 KiB a line and 6 bytes a character as JSON (control characters):
    // 500 lines of several builds in one frame would pass workerd's 32 MiB per message, and the
    // edge's runtime would close the cluster's session. A frame holds FRAME_MAX_BYTES of lines;
    // the rest leave with the next flush.
    let room = FRAME_MAX_BYTES;
    const keepMs = this.#o.resultKeepMs ?? RESULT_KEEP_MS;
    for (const ev of this.#builds.values()) {
      if (ev.endedAt !== undefined && Date.now() - ev.endedAt > keepMs) {
        this.#o.log?.("build result dropped: the edge has not acked it since the build ended", { buildId: ev.buildId, endedAt: new Date(ev.endedAt).toISOString() });
        this.#end(ev.buildId);
        continue;
      }
      // A result that left waits for the edge's ack; again after a new session or RESULT_RESEND_MS.
      if (ev.unacked !== undefined && Date.now() - ev.unacked < (this.#o.resultResendMs ?? RESULT_RESEND_MS)) continue;
      if (!ev.pending.length && !ev.result && Date.now() - ev.sentAt < HEARTBEAT_MS) continue;
      let n = 0;
      while (n < Math.min(ev.pending.length, 500) && (room -= jsonBytes(ev.pending[n]!)) >= 0) n++;
      // A result counts too (≤ MAX_TEMPLATE_CONFIG_BYTES, #steps): it goes with its last lines when
      // it fits, else with the next flush (alone in a frame if it must).
      const done = ev.result && n === ev.pending.length && ((room -= jsonBytes(ev.result)) >= 0 || (!items.length && !n)) ? ev.result : undefined;
      if (!n && !done && items.length && (ev.pending.length || ev.result)) break;
      const logs = ev.pending.slice(0, n);
      items.push({ buildId: ev.buildId, logs, ...(done ? { result: done } : {}) });
      if (items.length === 64 || room <= 0) break;
    }
    if (!items.length) {
      if (!this.#builds.size) this.stop();
      return;
    }
    const sent = this.#deliver(items);
    if (!sent) return;
    for (const it of sent) {
      const ev = this.#builds.get(it.buildId)!;
      ev.pending.splice(0, it.logs.length);
      ev.sentAt = Date.now();
      if (it.result && this.#acks) ev.unacked = Date.now();
      else if (it.result) this.#end(it.buildId);
      else if (it.logs.length) this.#keep(ev);
    }
    if (!this.#builds.size) this.stop();
  }

  /** Sends `items`: those that went, or undefined when the link is down (all go with the next
   * flush). A frame the link refuses (a bug here: what goes out is bounded) must not escape: this
   * runs from a timer, where a throw ends the agent, and the journal would replay the build into
   * the same throw after every restart. The link's check is frame-wide, so the items of a refused
   * frame of several go again one by one: only an item refused alone costs its build (#unsent). */
  #deliver(items: BuildEvents["items"]): BuildEvents["items"] | undefined {
    try {
      const went = this.#o.send(items);
      if (!went) return undefined;
      this.#acks = went === "ack";
      return items;
    } catch (err) {
      this.#o.log?.(`build events not sent: ${(err as Error).message.slice(0, 500)}`, { builds: items.length });
      if (items.length === 1) {
        this.#unsent(this.#builds.get(items[0]!.buildId)!, items[0]!, err as Error);
        return [];
      }
      const went: BuildEvents["items"] = [];
      for (const it of items) {
        const alone = this.#deliver([it]);
        if (!alone) break; // the link went down: the rest go with the next flush
        went.push(...alone);
      }
      return went;
    }
  }

  /** An item the link refused alone: its lines are dropped (one warn line says how many), a result
   * in it becomes an error result, and a build refused SEND_FAILURES times is given up: its run is
   * stopped as a step timeout stops it (killed, cgroup and staging removed), its lines after that
   * are dropped, and it ends with GIVEN_UP once the run stopped, so the edge fails it then rather
   * than after BUILD_SILENCE_MS. If even that is refused, it is forgotten. */
  #unsent(ev: Events, it: BuildEvents["items"][number], err: Error): void {
    ev.pending.splice(0, it.logs.length);
    const failures = ++ev.sendFailures;
    if (failures > SEND_FAILURES || (ev.givenUp && it.result)) {
      this.#o.log?.("build forgotten: even its end cannot be sent", { buildId: ev.buildId });
      this.#end(ev.buildId);
      if (!this.#builds.size) this.stop();
      return;
    }
    if (failures === SEND_FAILURES) {
      this.#o.log?.("build given up: its events cannot be sent; stopping it", { buildId: ev.buildId });
      ev.givenUp = true;
      ev.pending.length = 0;
      ev.stop.abort(new Error(GIVEN_UP));
      if (ev.settled) this.#ended(ev, { status: "error", message: GIVEN_UP });
      else this.#keep(ev); // a restart before the run stopped does not run it again
      return;
    }
    if (it.logs.length) ev.add(`${it.logs.length} log lines could not be sent to the edge`, "warn");
    if (it.result) this.#ended(ev, { status: "error", message: clipText(`the build's result could not be sent to the edge: ${err.message}`, MAX_MESSAGE_LENGTH) });
  }

  /** A build whose end was reported (or given up): forgotten, here and in the journal. */
  #end(buildId: string): void {
    this.#builds.delete(buildId);
    this.#frames.delete(buildId);
    this.#journalWrite(() => this.#journal?.done(buildId));
  }

  #keep(ev: Events): void {
    this.#journalWrite(() => this.#journal?.put({ frame: this.#frames.get(ev.buildId)!, seq: ev.seq - ev.pending.length, ...(ev.result ? { result: ev.result, endedAt: ev.endedAt } : {}), ...(ev.givenUp ? { givenUp: true as const } : {}) }));
  }

  /** A journal the disk refuses (full, read-only) costs the resume after a restart, not the agent. */
  #journalWrite(write: () => void): void {
    try {
      write();
    } catch (err) {
      this.#o.log?.(`build journal: ${(err as Error).message}`);
    }
  }

  async #run(frame: BuildFrame, ev: Events): Promise<BuildResult> {
    const held = new Set<string>();
    this.#held.set(frame.buildId, held);
    try {
      return await this.#steps(frame, ev, held);
    } finally {
      // Its record (published last) names them from now on, or the build failed.
      this.#held.delete(frame.buildId);
      this.#o.onBuildEnd?.(frame.teamId);
    }
  }

  async #steps(frame: BuildFrame, ev: Events, held: Set<string>): Promise<BuildResult> {
    const store = this.#o.store;
    const baseName = "rootfs" in frame.from ? frame.from.rootfs : rootfsForImage(frame.from.image, (n) => store.template(n) !== undefined);
    if (!baseName || !store.templateTrees(baseName)) {
      const what = "image" in frame.from ? `image "${frame.from.image}" cannot be pulled: this server has no registry access, and no rootfs template of that name was imported (rootfs/cli.ts import)` : `the base template's root filesystem "${frame.from.rootfs}" is not on this machine`;
      throw new StepFailed(what, "base");
    }
    const baseLayers = store.template(baseName)!.layers;
    for (const l of baseLayers) held.add(l);
    ev.add(`FROM ${baseName} (${baseLayers.length} layer${baseLayers.length === 1 ? "" : "s"})`, "info", "base");
    if (typeof this.#o.uids === "string") ev.add(`build steps run as the host's root, without a user namespace: ${this.#o.uids}`, "warn", "base");
    const plan = planSteps({ teamId: frame.teamId, buildId: frame.buildId, baseLayers, steps: frame.steps, force: frame.force, config: frame.config });
    // The result the edge will read (its agent-link schema), known before any step runs: one past
    // its bounds (a base's env plus the steps' past MAX_ENV_VARS or MAX_TEMPLATE_CONFIG_BYTES, or a
    // frame the edge did not bound) fails the build here, instead of a frame the link refuses (or
    // one past workerd's message size) after the work.
    const result: BuildResult = { status: "ready", user: plan.config.user, workdir: plan.config.workdir, env: plan.config.env };
    const bad = configProblem(result);
    if (bad) throw new StepFailed(bad, "finalize");
    const layers = [...baseLayers];
    // What this build's own layers may still take (cached ones were paid for by the build that made them).
    const budget = { mb: this.#o.buildDiskMB, files: this.#o.buildFiles ?? BUILD_FILES };
    // Stopped (given up, #unsent) or the builder disposed: a claim wait ends at once; a step is killed.
    const signal = AbortSignal.any([this.#disposed.signal, ev.stop.signal]);
    for (const p of plan.steps) {
      if (ev.stop.signal.aborted) throw new StepFailed((ev.stop.signal.reason as Error).message, p.label);
      const line = describeStep(p, plan.steps.length);
      if (!p.layer) {
        ev.add(line, "info", p.label);
        continue;
      }
      const id = layerIdOf(p.key);
      // Held before the cache is looked at: a sweep either removed it first (then it is built
      // again here) or sees it held.
      held.add(id);
      // One build of a key at a time on this machine (step-claim.ts): a second one waits and
      // finds it cached. A forced step's key is this build's own.
      const claim = await claimStep(join(store.root, "layers"), id, {
        hasLayer: () => !p.forced && store.layer(id) !== undefined,
        onWait: (pid, first) => ev.add(`${line}: ${first ? "waiting for" : "still waiting for"} another build of the same step on this machine (pid ${pid}) to finish`, "info", p.label),
        // The other build's step ends within its own timeout (the same default): a wait longer
        // than that is a hung owner, and this build fails saying so rather than waiting forever.
        maxWaitMs: this.#o.stepTimeoutMs ?? STEP_TIMEOUT_MS,
        signal,
      }).catch((err: Error) => {
        const why = signal.aborted ? (signal.reason as Error).message : err.message;
        throw new StepFailed(`step ${p.label} (${p.step.type}): ${why}`, p.label);
      });
      if (claim === "cached") {
        store.touchLayer(id);
        ev.add(`CACHED ${line}`, "info", p.label);
        layers.push(id);
        continue;
      }
      try {
        ev.add(line, "info", p.label);
        await this.#buildLayer(frame, p, id, layers, ev, budget);
      } finally {
        claim();
      }
      layers.push(id);
    }
    // Stopped during the last step's commit (treeSize, commitLayer: not abortable): not published,
    // since its end is GIVEN_UP and the edge fails the build; its layers stay cached.
    if (ev.stop.signal.aborted) throw new StepFailed((ev.stop.signal.reason as Error).message, "finalize");
    store.putTemplate(frame.output, layers);
    ev.add(`Template ${frame.output} ready: ${layers.length} layers`, "info", "finalize");
    return result;
  }

  async #buildLayer(frame: BuildFrame, p: PlannedStep, id: string, lowers: string[], ev: Events, budget: { mb: number | undefined; files: number }): Promise<void> {
    const store = this.#o.store;
    const started = Date.now();
    const what = `step ${p.label} (${p.step.type})`;
    const maxFiles = this.#o.buildFiles ?? BUILD_FILES;
    // The step's disk: what is left of the build's bounds, within what the host can spare. Sized
    // before its staging directory exists, so a refusal leaves nothing to remove.
    if (budget.files < MIN_STEP_FILES) throw new StepFailed(`${what}: the build's layers already hold its bound of ${maxFiles} files`, p.label);
    const fs = hostFs(join(store.root, "layers"));
    let files = stepFiles(budget.files, fs && fs.files > 0 ? fs.ffree : undefined);
    if (files < MIN_STEP_FILES) throw new StepFailed(`${what}: the host has too few free inodes for a build step (it keeps ${HOST_RESERVE_FILES} free)`, p.label);
    let diskMB: number | undefined;
    if (budget.mb !== undefined) {
      if (budget.mb < MIN_DISK_MB) throw new StepFailed(`${what}: the build's layers already hold its disk bound of ${this.#o.buildDiskMB} MiB`, p.label);
      diskMB = stepDiskMB(budget.mb, fs ? fs.bavail * fs.bsize : 0);
      if (diskMB < MIN_DISK_MB) throw new StepFailed(`${what}: the host has too little free disk space for a build step (it keeps ${HOST_RESERVE_MB} MiB free)`, p.label);
      // No more than one per 16 KiB (ext4's usual ratio): the inode tables must fit the image.
      files = Math.min(files, diskMB * 64);
    }
    const staging = store.stagingDir(id);
    const layout = this.#o.cgroups;
    const cg = layout && cgroupSetFor(layout, `${frame.buildId.slice(0, 36)}-${p.label}`);
    // A uid range of the step's own, leased host-wide as a sandbox's is, naming a file in its
    // staging directory (a lease whose file is gone, a dead builder's, is taken over).
    const uids = typeof this.#o.uids === "object" ? this.#o.uids : undefined;
    const leaseFile = join(staging, "userns.json");
    let userns: IdRange | undefined;
    try {
      userns = uids?.keep(undefined, leaseFile);
      if (userns) writeFileSync(leaseFile, JSON.stringify({ userns }), { mode: 0o600 });
      if (layout && cg) createCgroups(layout, cg, { cpuCount: frame.cpuCount, memoryMB: frame.memoryMB, pidsMax: STEP_PIDS });
      const step = await this.#sandboxStep(frame, p, staging);
      const net = await this.#o.network?.(staging);
      const { code, diskFull } = await runStep({
        net,
        cgroupProcs: cg && procsFiles(cg),
        seccomp: this.#seccomp,
        lowers: lowers.map((l) => store.layerTree(l)),
        staging,
        config: p.config,
        step,
        timeoutMs: this.#o.stepTimeoutMs ?? STEP_TIMEOUT_MS,
        // A build given up is stopped as a timeout stops its step (killed; the cgroup below is killed too).
        signal: ev.stop.signal,
        onLine: (l, stream) => ev.add(l, stream === "stderr" ? "warn" : "info", p.label),
        ...(diskMB !== undefined ? { diskMB, files } : {}),
        ...(userns ? { userns } : {}),
      }).finally(() => net?.close());
      if (code !== 0) {
        const disk =
          diskFull === "files"
            ? `; it used up the files its disk may hold (${files}: what was left of the build's ${maxFiles} files for all its layers, or of the host's free inodes, within one per 16 KiB of the disk)`
            : diskFull
              ? `; it filled its disk (${diskMB} MiB: what was left of the build's ${this.#o.buildDiskMB} MiB for all its layers, or of the host's free space)`
              : "";
        throw new StepFailed(`${what} failed: ${exitText(code, frame.memoryMB)}${disk}`, p.label);
      }
      rmSync(join(staging, "files"), { force: true });
      // The step's pid namespace ended with it: none of its processes holds the range now.
      if (userns) uids!.release(userns, leaseFile);
      rmSync(leaseFile, { force: true });
      // Counted before it is published (the disk's count is rounded up, and a step without one has none).
      const size = await treeSize(join(staging, "rootfs"));
      if (size.files > budget.files) throw new StepFailed(`${what}: its layer holds ${size.files} files, more than the ${budget.files} left of the build's bound of ${maxFiles} files for all its layers`, p.label);
      const info = await store.commitLayer(staging, { id, kind: "build", source: { step: p.step.type, key: p.key }, team: frame.teamId }, started, "", size);
      if (budget.mb !== undefined) budget.mb -= Math.ceil(info.bytes / (1024 * 1024));
      budget.files -= info.files;
    } finally {
      if (cg) await killAndRemove(cg).catch((err: Error) => this.#o.log?.(`build ${frame.buildId}: ${err.message}`));
      if (userns) uids!.release(userns, leaseFile);
      // What the step left (a failed step's, or a partial copy of its layer) is the tenant's tree.
      // One that cannot go whole stays for the next start's sweep (journal.ts removeDeadStaging).
      await removeTree([staging]).catch((err: Error) => this.#o.log?.(`build ${frame.buildId}: staging ${staging}: ${err.message}`));
    }
  }

  async #sandboxStep(frame: BuildFrame, p: PlannedStep, staging: string): Promise<SandboxStep> {
    const a = p.step.args;
    switch (p.step.type) {
      case "RUN":
        return { kind: "run", command: a[0]!, user: a[1] || p.config.user };
      case "WORKDIR":
        return { kind: "workdir", dir: a[0]! };
      case "COPY": {
        const archive = join(staging, "files");
        writeFileSync(archive, await this.#o.fetchFile(`${frame.filesPath}${p.step.filesHash}`));
        return { kind: "copy", src: a[0]!, dest: a[1]!, owner: a[2] || p.config.user, mode: a[3] ?? "", archive };
      }
      default:
        throw new Error(`step ${p.step.type} makes no layer`);
    }
  }
}
