// The builds this agent has been handed and not finished, on disk, so an agent that died mid-build
// resumes them when it starts again (steps already committed are cached layers, so the build goes
// on from the step that was cut). Each entry keeps the next log sequence number the edge has not
// seen, so lines after the restart are new lines there, not repeats it drops.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { BuildFrameSchema, type BuildFrame } from "../../../../schema/protocol/build.ts";
import { removeDeadClaims } from "./step-claim.ts";
import { removeMountPoint, STEP_ROOTS, stepRootOf } from "./sandbox.ts";
import { unmountUnderSync } from "../userns.ts";
import { removeTree } from "../remove-tree.ts";
import { helperEnv } from "../host-helpers.ts";

export interface JournalEntry {
  frame: BuildFrame;
  /** The first log sequence number not yet delivered. */
  seq: number;
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
        const raw = JSON.parse(readFileSync(join(this.#dir, name), "utf8")) as { frame: unknown; seq: unknown };
        const frame = BuildFrameSchema.parse(raw.frame);
        const seq = Number.isSafeInteger(raw.seq) && (raw.seq as number) >= 0 ? (raw.seq as number) : 0;
        out.push({ frame, seq });
      } catch (err) {
        onBad(name, (err as Error).message);
        rmSync(join(this.#dir, name), { force: true });
      }
    }
    return out;
  }
}

/** A dead builder's staging directories (`.build-<layer>-<pid>-<ms>` in the store's layers): the
 * step's overlay and disk may still be mounted there; and what a dead process's layer removal
 * left (`.remove-<layer>-<pid>-<ms>`, store.ts). Staging of live processes (another agent) stays; so
 * do their step claims (step-claim.ts), dead ones go. Claims and mounts are dealt with before this
 * returns its promise; the trees (the tenant's: remove-tree.ts) go after. */
export async function removeDeadStaging(layersDir: string): Promise<void> {
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
    if (removal && !existsSync(`/proc/${removal[1]}`)) doomed.push(name);
    const m = /^\.build-.+-(\d+)-\d+$/.exec(name);
    if (!m || existsSync(`/proc/${m[1]}`)) continue;
    // The overlay first (at STEP_ROOTS with a user namespace), then every mount under the staging
    // directory: the step's disk its upper directory is on (sandbox.ts `diskMB`), the layers
    // below and the upper directory ID-mapped (`userns`).
    // An agent before stepRootOf mounted the root at STEP_ROOTS/<name> itself.
    const root = stepRootOf(name);
    for (const at of [join(layersDir, name, "merged"), root, join(STEP_ROOTS, name)]) if (existsSync(at)) spawnSync("umount", ["-l", at], { env: helperEnv() });
    removeMountPoint(root);
    unmountUnderSync(join(layersDir, name));
    doomed.push(name);
  }
  // One that cannot go (still busy) stays for the next start: it must not stop the others.
  for (const name of doomed) await removeTree([join(layersDir, name)]).catch((err: Error) => console.warn(`build staging ${name}: ${err.message}`));
}
