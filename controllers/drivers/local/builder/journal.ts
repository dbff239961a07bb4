// The builds this agent has been handed and not finished, on disk, so an agent that died mid-build
// resumes them when it starts again (steps already committed are cached layers, so the build goes
// on from the step that was cut). Each entry keeps the next log sequence number the edge has not
// seen, so lines after the restart are new lines there, not repeats it drops, and a build's end
// until the edge acked it, so a restart sends that again instead of running the build again.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, realpathSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { BuildFrameSchema, BuildResultSchema, type BuildFrame, type BuildResult } from "../../../../schema/protocol/build.ts";
import { removeDeadClaims } from "./step-claim.ts";
import { removeMountPoint, STEP_ROOTS, stepRootOf } from "./sandbox.ts";
import { mountsUnder } from "../userns.ts";
import { removeTree } from "../remove-tree.ts";
import { helperEnv } from "../host-helpers.ts";

export interface JournalEntry {
  frame: BuildFrame;
  /** The first log sequence number not yet delivered. */
  seq: number;
  /** How it ended, while the edge has not acked that (builder.ts `acked`). */
  result?: BuildResult;
  /** When it ended (ms since the epoch): a result kept past RESULT_KEEP_MS is dropped (builder.ts). */
  endedAt?: number;
  /** Given up (builder.ts #unsent) before its run stopped: resumed as ended (GIVEN_UP), not run again. */
  givenUp?: true;
}

export class BuildJournal {
  readonly #dir: string;

  constructor(dir: string) {
    this.#dir = dir;
    mkdirSync(dir, { recursive: true });
  }

  #file(buildId: string): string {
    // Build ids are UUIDs (schema); anything else is not written.
    if (!/^[A-Za-z0-9-]{1,64}$/.test(buildId)) throw new Error(`build id ${JSON.stringify(buildId)} is not a file name`);
    return join(this.#dir, `${buildId}.json`);
  }

  put(entry: JournalEntry): void {
    const f = this.#file(entry.frame.buildId);
    writeFileSync(`${f}.tmp`, JSON.stringify(entry), { mode: 0o600 });
    renameSync(`${f}.tmp`, f);
  }

  done(buildId: string): void {
    rmSync(this.#file(buildId), { force: true });
  }

  /** Unfinished builds, parsed strictly (a damaged entry is dropped, with its reason). */
  list(onBad: (file: string, why: string) => void): JournalEntry[] {
    const out: JournalEntry[] = [];
    for (const name of readdirSync(this.#dir)) {
      if (!name.endsWith(".json")) continue;
      try {
        const raw = JSON.parse(readFileSync(join(this.#dir, name), "utf8")) as { frame: unknown; seq: unknown; result?: unknown; endedAt?: unknown; givenUp?: unknown };
        const frame = BuildFrameSchema.parse(raw.frame);
        const seq = Number.isSafeInteger(raw.seq) && (raw.seq as number) >= 0 ? (raw.seq as number) : 0;
        // A result the link's schema refuses is run again rather than sent into the same refusal.
        const result = raw.result === undefined ? undefined : BuildResultSchema.safeParse(raw.result).data;
        // None (an entry from before session 32) or not a time: counted from now.
        const endedAt = Number.isSafeInteger(raw.endedAt) && (raw.endedAt as number) > 0 ? (raw.endedAt as number) : undefined;
        out.push({ frame, seq, ...(result ? { result, ...(endedAt ? { endedAt } : {}) } : {}), ...(raw.givenUp === true ? { givenUp: true as const } : {}) });
      } catch (err) {
        onBad(name, (err as Error).message);
        rmSync(join(this.#dir, name), { force: true });
      }
    }
    return out;
  }
}

/** A builder's staging name (`.build-<layer>-<pid>-<ms>`, store.ts stagingDir): its pid. */
const STAGING = /^\.build-.+-(\d+)-\d+$/;

/** The mount points of dead builders, deepest first: every mount in the mount table under a
 * staging directory (`<layersDir>/.build-…`: the step's disk, the layers below and the upper
 * directory ID-mapped, the overlay without a user namespace) or under the step root named as one
 * (`<STEP_ROOTS>/.build-…/root`, or `<STEP_ROOTS>/.build-…` itself as an older agent mounted it),
 * whose builder's pid is gone. Found from the table, not from the staging directories: a build
 * killed midway may leave its step's root mounted after its staging directory went (removed by
 * hand, or by an older agent's sweep, which unmounted only what a staging directory named). */
export function deadStepMounts(layersDir: string, alive: (pid: string) => boolean, mountinfo?: string, stepRoots = STEP_ROOTS): string[] {
  const dead = (prefix: string) =>
    mountsUnder(prefix, mountinfo).filter((at) => {
      const m = STAGING.exec(at.slice(prefix.replace(/\/+$/, "").length + 1).split("/")[0]!);
      return m !== null && !alive(m[1]!);
    });
  return [...dead(stepRoots), ...dead(layersDir)].sort((a, b) => b.length - a.length);
}

const processAlive = (pid: string) => existsSync(`/proc/${pid}`);

/** A dead builder's staging directories (`.build-<layer>-<pid>-<ms>` in the store's layers) and
 * its mounts (deadStepMounts); and what a dead process's layer removal left
 * (`.remove-<layer>-<pid>-<ms>`, store.ts). Staging of live processes (another agent) stays; so
 * do their step claims (step-claim.ts), dead ones go. Claims and mounts are dealt with before this
 * returns its promise; the trees (the tenant's: remove-tree.ts) go after. */
export async function removeDeadStaging(layersDir: string): Promise<void> {
  // The mount table names resolved paths (a store reached through a link).
  let real = layersDir;
  try {
    real = realpathSync(layersDir);
  } catch {
    // no layers yet: nothing of a build can be mounted there
  }
  for (const at of deadStepMounts(real, processAlive)) spawnSync("umount", ["-l", at], { env: helperEnv() });
  // The step roots' mount points of dead builders, mounted or not (a staging directory gone).
  let roots: string[] = [];
  try {
    roots = readdirSync(STEP_ROOTS);
  } catch {
    // none made yet
  }
  for (const name of roots) {
    const m = STAGING.exec(name);
    if (m && !processAlive(m[1]!)) removeMountPoint(stepRootOf(name));
  }
  let names: string[];
  try {
    names = readdirSync(layersDir);
  } catch {
    return;
  }
  removeDeadClaims(layersDir, names);
  const doomed: string[] = [];
  for (const name of names) {
    // `-<pid>-<ms>`, or `-<pid>` as older agents named them.
    const removal = /^\.remove-.+-(\d+)-\d{13}$/.exec(name) ?? /^\.remove-.+-(\d+)$/.exec(name);
    if (removal && !processAlive(removal[1]!)) doomed.push(name);
    const m = STAGING.exec(name);
    if (m && !processAlive(m[1]!)) doomed.push(name);
  }
  // One that cannot go (still busy) stays for the next start: it must not stop the others.
  for (const name of doomed) await removeTree([join(layersDir, name)]).catch((err: Error) => console.warn(`build staging ${name}: ${err.message}`));
}
