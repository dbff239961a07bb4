// The newest intent the agent accepted for each sandbox, kept on disk.
//
// The edge resends only what the agent's inventory lacks, so after an agent restart the agent
// itself must remember what it was asked for: the runtime needs each sandbox's access token and env
// vars again, and a sandbox whose intent was accepted but not yet applied must still be built.
// One small JSON file per sandbox, written atomically (tmp + rename) under a name of its own
// (`<id>.<n>.json`, n counting up across the store), then the sandbox's previous file removed.
// Never renamed over an existing file: ext4 (auto_da_alloc) flushes the new file's data on such
// a rename, and with the sandboxes' disks being written the agent's event loop waited 1-7 ms per
// write for it (issue 16; a rename to a new name, 0.2-0.4 ms). A crash between the rename and the
// removal leaves two files: the higher n is the newer.
//
// An intent is held in memory when it arrives and written before its ack goes out (`durable`),
// not at once: the edge's outbox sends an unacked intent again (after a reconnect, or when it is
// due), so one lost with a crash before its ack comes back, and only what was acked must be on
// disk. A delete is never written: its pass removes the sandbox's file first (`durable`), so an
// agent that dies while destroying finds no intent and destroys what the driver still has.
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { IntentSchema, type Intent } from "../../schema/protocol/index.ts";

export class IntentStore {
  readonly #dir: string;
  readonly #intents = new Map<string, Intent>();
  /** Sandboxes whose intent in memory is not the one on disk yet. */
  readonly #unwritten = new Set<string>();
  /** The file of each sandbox that has one. */
  readonly #files = new Map<string, string>();
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
      try {
        if (this.#files.has(f.id)) throw new Error("an older file of the same sandbox");
        const intent = IntentSchema.parse(JSON.parse(readFileSync(join(dir, f.name), "utf8")));
        if (intent.sandboxId !== f.id) throw new Error("not this sandbox's");
        this.#intents.set(intent.sandboxId, intent);
        this.#files.set(intent.sandboxId, f.name);
      } catch {
        // Superseded, torn or foreign: drop it; the edge's resync supplies a lost intent again.
        rmSync(join(dir, f.name), { force: true });
      }
    }
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
    const name = `${intent.sandboxId}.${this.#next++}.json`;
    const file = join(this.#dir, name);
    writeFileSync(`${file}.tmp`, JSON.stringify(intent), { mode: 0o600 });
    renameSync(`${file}.tmp`, file);
    this.#remove(intent.sandboxId);
    this.#files.set(intent.sandboxId, name);
  }

  #remove(id: string): void {
    const name = this.#files.get(id);
    if (name === undefined) return;
    this.#files.delete(id);
    rmSync(join(this.#dir, name), { force: true });
  }

  forget(id: string): void {
    this.#intents.delete(id);
    this.#unwritten.delete(id);
    this.#remove(id);
  }
}
