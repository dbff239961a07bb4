// What sandboxes carry over a Stop pause to their resume (RuntimeSandbox.carried: the code
// interpreter's contexts), kept in memory and, given a directory, in `<dir>/<id>.json` too, written
// whenever it changes and kept until the sandbox is deleted, so an agent restart (with the sandbox
// running or Stop-paused) does not forget it. Written as the local driver writes its records
// (write + rename, 0600: only the agent reads them); the values must be plain JSON.
import { mkdirSync, readFileSync, readdirSync, renameSync, rmSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { logger } from "../lib/log.ts";

const LOG = logger("runtime");

/** Sandbox ids are the edge's (letters, digits, dashes); anything else never names a file. */
const SAFE_ID = /^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$/;

export class ParkedStates {
  readonly #dir: string | undefined;
  readonly #mem = new Map<string, Map<string, unknown>>();
  /** The ids with a file in `#dir` (listed at start; only this process writes there: the agent's
   * data directory is locked). Most sandboxes never carry anything, and their delete then costs
   * no syscall (an rmSync of a missing file was an lstat and a thrown ENOENT per kill). */
  readonly #files = new Set<string>();

  constructor(dir?: string) {
    this.#dir = dir;
    if (!dir) return;
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    for (const name of readdirSync(dir)) if (name.endsWith(".json")) this.#files.add(name.slice(0, -5));
  }

  #file(id: string): string | undefined {
    return this.#dir && SAFE_ID.test(id) ? join(this.#dir, `${id}.json`) : undefined;
  }

  /** What `id` carried when it was Stop-paused (by this agent or one before it), if anything. */
  get(id: string): Map<string, unknown> | undefined {
    const kept = this.#mem.get(id);
    if (kept) return kept;
    const file = this.#file(id);
    if (!file || !this.#files.has(id)) return undefined;
    try {
      const parsed = JSON.parse(readFileSync(file, "utf8")) as unknown;
      if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) return undefined;
      return new Map(Object.entries(parsed));
    } catch {
      return undefined;
    }
  }

  set(id: string, state: Map<string, unknown>): void {
    if (!state.size) return this.delete(id);
    this.#mem.set(id, state);
    const file = this.#file(id);
    if (!file) return;
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, JSON.stringify(Object.fromEntries(state)), { mode: 0o600 });
    renameSync(tmp, file);
    this.#files.add(id);
  }

  /** `why`: logged when there was something to drop (the sandbox was deleted). */
  delete(id: string, why?: string): void {
    const had = this.#mem.delete(id);
    const file = this.#file(id);
    let removed = false;
    if (file && this.#files.delete(id)) {
      try {
        unlinkSync(file);
        removed = true;
      } catch {
        // removed by hand meanwhile
      }
    }
    if (why && (had || removed)) LOG.info("carried state dropped", { sandboxId: id, why });
  }

  /** Drops what sandboxes no longer known (deleted while the agent was down) left behind. */
  retainOnly(ids: Iterable<string>): void {
    const keep = new Set(ids);
    for (const id of this.#mem.keys()) if (!keep.has(id)) this.#mem.delete(id);
    if (!this.#dir) return;
    for (const name of readdirSync(this.#dir)) {
      const id = name.endsWith(".json") ? name.slice(0, -5) : undefined;
      if (id && keep.has(id)) continue;
      rmSync(join(this.#dir, name), { force: true });
      if (id) this.#files.delete(id);
    }
  }
}
