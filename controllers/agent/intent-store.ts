// The newest intent the agent accepted for each sandbox, kept on disk.
//
// The edge resends only what the agent's inventory lacks, so after an agent restart the agent
// itself must remember what it was asked for: the runtime needs each sandbox's access token and env
// vars again, and a sandbox whose intent was accepted but not yet applied must still be built.
// One small JSON file per sandbox, written atomically (tmp + rename).
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { IntentSchema, type Intent } from "../../schema/protocol/index.ts";

export class IntentStore {
  readonly #dir: string;
  readonly #intents = new Map<string, Intent>();

  constructor(dir: string) {
    this.#dir = dir;
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    for (const name of readdirSync(dir)) {
      if (!name.endsWith(".json")) continue;
      try {
        const intent = IntentSchema.parse(JSON.parse(readFileSync(join(dir, name), "utf8")));
        this.#intents.set(intent.sandboxId, intent);
      } catch {
        // A torn or foreign file: drop it; the edge's resync supplies the intent again.
        rmSync(join(dir, name), { force: true });
      }
    }
  }

  get(id: string): Intent | undefined {
    return this.#intents.get(id);
  }

  ids(): string[] {
    return [...this.#intents.keys()];
  }

  /** Stores `intent` if it is newer than what is stored; returns whether it was. */
  offer(intent: Intent): boolean {
    const have = this.#intents.get(intent.sandboxId);
    if (have && have.generation >= intent.generation) return false;
    this.#write(intent);
    return true;
  }

  /** The one-time request of this generation (its snapshot) was acted on: kept without it, so a
   * restarted agent does not take it again (a snapshot deleted since would come back). */
  snapshotDone(id: string, generation: number): void {
    const have = this.#intents.get(id);
    if (!have || have.generation !== generation || !have.snapshot) return;
    const { snapshot: _, ...rest } = have;
    this.#write(rest);
  }

  #write(intent: Intent): void {
    const file = join(this.#dir, `${intent.sandboxId}.json`);
    writeFileSync(`${file}.tmp`, JSON.stringify(intent), { mode: 0o600 });
    renameSync(`${file}.tmp`, file);
    this.#intents.set(intent.sandboxId, intent);
  }

  forget(id: string): void {
    this.#intents.delete(id);
    rmSync(join(this.#dir, `${id}.json`), { force: true });
  }
}
