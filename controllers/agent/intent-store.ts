// The newest intent the agent accepted for each sandbox, kept on disk.
//
// The edge resends only what the agent's inventory lacks, so after an agent restart the agent
// itself must remember what it was asked for: the runtime needs each sandbox's access token and env
// vars again, and a sandbox whose intent was accepted but not yet applied must still be built.
// One small JSON file per sandbox, written under a name of its own (`<id>.<n>.json`, n counting up
// across the store), never over an existing file: ext4 (auto_da_alloc) flushes the new file's data
// on a rename over one, and with the sandboxes' disks being written the agent's event loop waited
// 1-7 ms per write for it (issue 16). That flush was also what made a replaced file "old or new"
// across a host crash; a new file can come back empty (delayed allocation). So the sandbox's
// previous file stays until the new one is on disk: a sweep off the event loop (the thread pool)
// fsyncs what was written since the last one, and the directory, then removes the files they
// superseded. At start the newest file of a sandbox that parses wins; older ones are dropped. That
// rule is also what makes a write cut short by a crash harmless (a prefix of the JSON does not
// parse, and the file before it is still there), so a new file is written under its final name,
// never over an existing one (`wx`: the rule needs the older file intact), not as a tmp file
// renamed (session 36: a rename, 0.2-0.4 ms, and a name made and dropped less per write; files
// `*.tmp` that older agents left are still removed at start).
//
// An intent is held in memory when it arrives and written (`durable`) before the driver acts on it
// or its ack goes out, whichever comes first (reconciler.ts), not at once: the edge's outbox sends
// an unacked intent again (after a reconnect, or when it is due), so one lost with a crash before
// either comes back; what the cluster reflects or the edge was told must be on disk. A delete is never written: the sandbox's files are removed as it is offered (an unlink is
// cheap), so an agent that dies before or while destroying finds no intent and destroys what the
// driver still has, and a kill waiting in the queue does not come back to life after a crash.
import { mkdirSync, readdirSync, readFileSync, rmSync, unlinkSync, writeFileSync } from "node:fs";
import { open } from "node:fs/promises";
import { join } from "node:path";
import { IntentSchema, type Intent } from "../../schema/protocol/index.ts";

/** How long after a write its sweep runs (its older file is kept meanwhile). */
const SWEEP_DELAY_MS = 1000;

export class IntentStore {
  readonly #dir: string;
  readonly #intents = new Map<string, Intent>();
  /** Sandboxes whose intent in memory is not the one on disk yet. */
  readonly #unwritten = new Set<string>();
  /** The file of each sandbox that has one. */
  readonly #files = new Map<string, string>();
  /** Earlier files of each sandbox, kept until the sweep has its newer one on disk. */
  readonly #older = new Map<string, string[]>();
  /** Files written since the last sweep began: to be fsynced (those still current). */
  #unsynced = new Set<string>();
  /** The sweep running (or undefined); `#timer`: the next one, due. */
  #sweep: Promise<void> | undefined;
  #timer: NodeJS.Timeout | undefined;
  /** The n of the next file written. */
  #next = 1;

  constructor(dir: string) {
    this.#dir = dir;
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    // Newest first: `<id>.<n>.json`, or `<id>.json` as older agents wrote it (n 0).
    const files = readdirSync(dir)
      .map((name) => ({ name, m: /^([^.]+)(?:\.(\d+))?\.json$/.exec(name) }))
      .filter((f) => {
        // A write cut short (a .tmp), or something else: not an intent.
        if (!f.m) rmSync(join(dir, f.name), { force: true });
        return f.m !== null;
      })
      .map((f) => ({ name: f.name, id: f.m![1]!, n: Number(f.m![2] ?? 0) }))
      .sort((a, b) => b.n - a.n);
    for (const f of files) {
      this.#next = Math.max(this.#next, f.n + 1);
      const newest = this.#files.get(f.id);
      if (newest !== undefined) {
        // An older file of the same sandbox: kept until the newest is known to be on disk (the
        // agent that wrote it may have died before its sweep; the host may die yet).
        this.#unsynced.add(newest);
        this.#older.set(f.id, [...(this.#older.get(f.id) ?? []), f.name]);
        continue;
      }
      try {
        const intent = IntentSchema.parse(JSON.parse(readFileSync(join(dir, f.name), "utf8")));
        if (intent.sandboxId !== f.id) throw new Error("not this sandbox's");
        this.#intents.set(intent.sandboxId, intent);
        this.#files.set(intent.sandboxId, f.name);
      } catch {
        // Torn or foreign: drop it; an older file of the sandbox is read instead, and the edge's
        // resync supplies a lost intent again.
        rmSync(join(dir, f.name), { force: true });
      }
    }
    if (this.#unsynced.size) this.#startSweep();
  }

  get(id: string): Intent | undefined {
    return this.#intents.get(id);
  }

  ids(): string[] {
    return [...this.#intents.keys()];
  }

  /** Takes `intent` if it is newer than the one held; returns whether it was. On disk only once
   * `durable` is called for it. */
  offer(intent: Intent): boolean {
    const have = this.#intents.get(intent.sandboxId);
    if (have && have.generation >= intent.generation) return false;
    this.#intents.set(intent.sandboxId, intent);
    this.#unwritten.add(intent.sandboxId);
    // A delete's files go now, not when its pass comes (it may wait behind a pool's refill): a
    // kill the client was told of must not come back after an agent crash.
    if (intent.desired.state === "deleted") this.durable(intent.sandboxId);
    return true;
  }

  /** Puts the sandbox's intent on disk as it is held now (a delete: its file removed). Called
   * before an ack, so whatever the edge was told is done survives an agent crash. */
  durable(id: string): void {
    if (!this.#unwritten.has(id)) return;
    const intent = this.#intents.get(id);
    if (!intent || intent.desired.state === "deleted") this.#remove(id);
    else this.#write(intent);
    this.#unwritten.delete(id);
  }

  /** The one-time request of this generation (its snapshot) was acted on: kept without it, so a
   * restarted agent does not take it again (a snapshot deleted since would come back). */
  snapshotDone(id: string, generation: number): void {
    const have = this.#intents.get(id);
    if (!have || have.generation !== generation || !have.snapshot) return;
    const { snapshot: _, ...rest } = have;
    this.#intents.set(id, rest);
    this.#unwritten.add(id);
    this.durable(id);
  }

  #write(intent: Intent): void {
    const id = intent.sandboxId;
    const name = `${id}.${this.#next++}.json`;
    const file = join(this.#dir, name);
    try {
      writeFileSync(file, JSON.stringify(intent), { mode: 0o600, flag: "wx" });
    } catch (err) {
      // Whole bytes with a failed close would parse at the next start, untracked and never
      // removed: a deleted sandbox's intent back from the dead. Nothing of a failed write stays.
      unlinkQuiet(file);
      throw err;
    }
    const before = this.#files.get(id);
    if (before !== undefined) this.#older.set(id, [...(this.#older.get(id) ?? []), before]);
    this.#files.set(id, name);
    this.#unsynced.add(name);
    this.#startSweep();
  }

  /** Every file of the sandbox, the current one and those it superseded. */
  #remove(id: string): void {
    const names = [...(this.#older.get(id) ?? []), ...(this.#files.has(id) ? [this.#files.get(id)!] : [])];
    this.#files.delete(id);
    this.#older.delete(id);
    for (const name of names) unlinkQuiet(join(this.#dir, name));
  }

  /** A sweep a while after the first write that wants one: a sandbox's writes close together (a
   * claim, its pause) are fsynced once, as its newest file. */
  #startSweep(): void {
    if (this.#timer || this.#sweep) return;
    this.#timer = setTimeout(() => this.#runSweep(), SWEEP_DELAY_MS);
    this.#timer.unref();
  }

  #runSweep(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#sweep = this.#sweepOnce().finally(() => {
      this.#sweep = undefined;
      if (this.#unsynced.size || this.#older.size) this.#startSweep();
    });
  }

  /** Puts the current files written so far on disk, then removes what they superseded. One file
   * at a time: an fsync on a busy disk holds a thread-pool thread, and the pool is shared. */
  async #sweepOnce(): Promise<void> {
    const current = new Set(this.#files.values());
    // A file superseded before it was synced needs none: its newer one is here, or synced.
    const names = [...this.#unsynced].filter((n) => current.has(n));
    this.#unsynced.clear();
    const older = [...this.#older.entries()];
    try {
      for (const name of names) await fsyncPath(join(this.#dir, name));
      await fsyncPath(this.#dir); // the new names
    } catch {
      // The disk failed: the older files stay, the next sweep tries again, and a restart reads
      // the newest that parses.
      for (const n of names) this.#unsynced.add(n);
      return;
    }
    for (const [id, files] of older) {
      const now = this.#older.get(id);
      if (!now) continue; // removed with the sandbox
      for (const name of files) unlinkQuiet(join(this.#dir, name));
      const left = now.filter((n) => !files.includes(n));
      if (left.length) this.#older.set(id, left);
      else this.#older.delete(id);
    }
  }

  /** Resolves once the files written so far are on disk and what they superseded is gone. */
  async settled(): Promise<void> {
    for (;;) {
      if (this.#sweep) await this.#sweep;
      else if (this.#timer) this.#runSweep();
      else return;
    }
  }

  forget(id: string): void {
    this.#intents.delete(id);
    this.#unwritten.delete(id);
    this.#remove(id);
  }
}

/** unlink(2) of a file that may be gone already: rmSync would lstat it first, a syscall more on
 * the kill's path for a name that is always a file here. */
function unlinkQuiet(path: string): void {
  try {
    unlinkSync(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
  }
}

/** fsync(2) of a file's data (or a directory's entries); one removed meanwhile has none left. */
async function fsyncPath(path: string): Promise<void> {
  let fh;
  try {
    fh = await open(path, "r");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return;
    throw err;
  }
  try {
    await fh.datasync();
  } finally {
    await fh.close();
  }
}
