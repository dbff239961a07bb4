// One build of a step key at a time on this machine: the agent's builds and direct builds (other
// processes: `npm start`'s, `.ci/run`'s, a test setup's) share the layer store, so before a step's
// layer is built its builder claims the layer id with a file beside the layers (`.claim-<layer>`,
// holding the owner's pid and start time), made whole in a private file first and then linked to
// that name (link fails if the name exists): no other builder ever reads a claim half written. A
// second builder of the same key waits until the layer is there (then it is cached) or the claim
// is gone (the first failed or died: then it builds). A claim whose owner is dead (pid gone or
// reused) is taken over, by one waiter only (takeOver). The wait ends on the caller's signal, and after `maxWaitMs` with an error
// naming the owner: a hung owner cannot keep the waiter's build alive (its progress lines would
// keep the edge's silence check from ever failing it).
import { createHash, randomBytes } from "node:crypto";
import { existsSync, linkSync, readFileSync, readlinkSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { statFieldsIn } from "../proc-handle.ts";

/** The owner mark of this process: its pid and its start time (so a reused pid is not it). */
function mark(pid: number): string | undefined {
  try {
    // Field 22 of /proc/<pid>/stat, its start time.
    const start = statFieldsIn(readFileSync(`/proc/${pid}/stat`, "latin1"))?.[19];
    return start === undefined ? undefined : `${pid} ${start}`;
  } catch {
    return undefined;
  }
}

const OWN = mark(process.pid) ?? `${process.pid} ?`;

/** Whether the process a claim file names is still the one that wrote it. */
export function claimOwnerAlive(content: string): boolean {
  const pid = Number(content.split(" ")[0]);
  return Number.isSafeInteger(pid) && pid > 0 && mark(pid) === content.trim();
}

export interface ClaimWait {
  /** The layer is there now (built by the other claimer). */
  hasLayer(): boolean;
  /** Told once when the builder starts to wait, then every `reportMs`, with the owner's pid. */
  onWait(ownerPid: number, first: boolean): void;
  pollMs?: number;
  reportMs?: number;
  /** Longest the builder waits for another's claim before giving up (an error). */
  maxWaitMs?: number;
  signal?: AbortSignal;
}

/** An empty or unreadable claim this old is a leftover (a crash of a builder that wrote claims in
 * two steps); a younger one is left alone. */
const STALE_EMPTY_MS = 60_000;

/**
 * Claims layer `id` for building, or waits for another claimer's result. Resolves "cached" when
 * the layer appeared meanwhile, else a release function (call it once the step has ended,
 * published or not). Rejects when `signal` aborts or after `maxWaitMs` of waiting.
 */
export async function claimStep(layersDir: string, id: string, w: ClaimWait): Promise<"cached" | (() => void)> {
  const file = join(layersDir, `.claim-${id}`);
  const started = Date.now();
  let waitingSince: number | undefined;
  let reported = 0;
  for (;;) {
    w.signal?.throwIfAborted();
    if (w.hasLayer()) return "cached";
    if (create(file)) return claimed(file, w);
    const owner = read(file);
    if (owner === undefined) continue;
    if (!claimOwnerAlive(owner) && (owner.trim() !== "" || ageMs(file) > STALE_EMPTY_MS)) {
      // Its builder died mid-step: take it over. Another waiter may be doing the same; one wins.
      if (takeOver(file, owner)) return claimed(file, w);
      continue;
    }
    const now = Date.now();
    const pid = Number(owner.split(" ")[0]) || 0;
    if (now - started > (w.maxWaitMs ?? Infinity)) {
      throw new Error(`gave up waiting for another build of the same step on this machine (pid ${pid}) after ${Math.round((now - started) / 60_000)} minutes`);
    }
    if (waitingSince === undefined || now - reported >= (w.reportMs ?? 60_000)) {
      w.onWait(pid, waitingSince === undefined);
      waitingSince ??= now;
      reported = now;
    }
    await sleep(w.pollMs ?? 500, undefined, { signal: w.signal });
  }
}

/** Ours now: the release function; or "cached" when the layer was published between the check
 * and the claim (its builder released the claim just then), so the step is not built twice. */
function claimed(file: string, w: ClaimWait): "cached" | (() => void) {
  const release = () => {
    if (read(file) === OWN) rmSync(file, { force: true });
  };
  if (!w.hasLayer()) return release;
  release();
  return "cached";
}

/** Our claim, whole, under a private name beside `file`. */
function privateClaim(file: string): string {
  const tmp = `${file}.tmp-${process.pid}-${randomBytes(4).toString("hex")}`;
  writeFileSync(tmp, OWN, { flag: "wx" });
  return tmp;
}

/** Makes the claim file whole under a private name, then links it in; false if it exists. */
function create(file: string): boolean {
  const tmp = privateClaim(file);
  try {
    linkSync(tmp, file);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    return false;
  } finally {
    rmSync(tmp, { force: true });
  }
}

/** The name that admits one taker of the dead claim `dead` of `file` at a time; `after`: the dead
 * takers before it, in order (each one's successor marker is its own name). */
const takeoverMarker = (file: string, dead: string, after: readonly string[] = []) =>
  `${file}.takeover-${createHash("sha256").update([dead, ...after].join("\n")).digest("hex").slice(0, 16)}`;

/**
 * Replaces the dead claim `dead` in `file` by ours; false when another waiter takes it first (or
 * is taking it). Read, re-read and delete let two waiters that both read the dead claim both
 * build (the second deleting the first's fresh claim). Here a taker first makes the dead claim's
 * marker (a symlink naming the taker: made whole or not at all, and it fails if the name exists),
 * and only while holding it checks that the file is still the dead claim and renames its own
 * claim over it (atomic: never a moment without a claim, in which a creator could link one).
 * While the marker is held nobody else replaces the file: creators' links fail on the existing
 * name, other takers of this claim fail on the marker, and a taker of an older dead claim finds
 * the file is no longer that one. A waiter that read the dead claim before it was replaced makes
 * the marker after it is dropped and finds the file is someone else's claim.
 *
 * A taker that died holding its marker is never removed from under the others (a read, check and
 * delete of it could delete a live taker's marker made in between, letting two pass): the waiters
 * that find it dead go on to its successor marker, a name all of them derive from the dead taker,
 * so one of them wins that. Markers of a dead claim are removed only once the file is seen to be
 * something else: the dead claim never comes back, so no taker can pass them any more.
 */
function takeOver(file: string, dead: string): boolean {
  const deadTakers: string[] = [];
  const passed: string[] = [];
  let marker = takeoverMarker(file, dead);
  for (;;) {
    try {
      symlinkSync(OWN, marker);
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      const taker = readLink(marker);
      // Live: it is being taken over. Gone: a taker found the file replaced and cleaned up.
      if (taker === undefined || claimOwnerAlive(taker)) return false;
      passed.push(marker);
      deadTakers.push(taker);
      marker = takeoverMarker(file, dead, deadTakers);
    }
  }
  let replaced = false;
  try {
    if (read(file) !== dead) {
      replaced = true;
      return false;
    }
    const tmp = privateClaim(file);
    try {
      renameSync(tmp, file);
    } catch (err) {
      rmSync(tmp, { force: true });
      throw err;
    }
    replaced = true;
    return true;
  } finally {
    rmSync(marker, { force: true });
    if (replaced) for (const m of passed) rmSync(m, { force: true });
  }
}

function readLink(path: string): string | undefined {
  try {
    return readlinkSync(path);
  } catch {
    return undefined;
  }
}

function ageMs(file: string): number {
  try {
    return Date.now() - statSync(file).mtimeMs;
  } catch {
    return 0;
  }
}

function read(file: string): string | undefined {
  try {
    return readFileSync(file, "utf8");
  } catch {
    return undefined;
  }
}

/** Claims left by dead builders (the step's layer was never published), and dead takers' markers
 * and private files, for the start-up sweep. A dead claim goes under its takeover marker, as a
 * waiter's takeover replaces it (a claim made meanwhile is left alone); one whose first marker a
 * dead taker holds is left to the next waiter's takeover. */
export function removeDeadClaims(layersDir: string, names: string[]): void {
  for (const name of names) {
    if (!name.startsWith(".claim-")) continue;
    const path = join(layersDir, name);
    const tmp = /\.tmp-(\d+)-[0-9a-f]+$/.exec(name);
    if (tmp) {
      if (Number(tmp[1]) !== process.pid && !existsSync(`/proc/${tmp[1]}`)) rmSync(path, { force: true });
      continue;
    }
    if (name.includes(".takeover-")) {
      // Only once its claim is no longer a dead one (gone, or live: a dead claim never comes back,
      // and a claim alive now had no takers before): while the claim is dead, waiters may be
      // past this marker on its successors (takeOver), and a new marker of this name would let a
      // second taker in.
      const claim = read(join(layersDir, name.slice(0, name.indexOf(".takeover-"))));
      if (claim !== undefined && !claimOwnerAlive(claim)) continue;
      const taker = readLink(path);
      if (taker !== undefined && !claimOwnerAlive(taker)) rmSync(path, { force: true });
      continue;
    }
    const owner = read(path);
    if (owner === undefined || claimOwnerAlive(owner)) continue;
    const marker = takeoverMarker(path, owner);
    try {
      symlinkSync(OWN, marker);
    } catch {
      continue; // a waiter is taking it over
    }
    try {
      if (read(path) === owner) rmSync(path, { force: true });
    } finally {
      rmSync(marker, { force: true });
    }
  }
}
