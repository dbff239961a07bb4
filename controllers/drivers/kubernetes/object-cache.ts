// A namespace-scoped informer for one resource kind: list, then watch from the list's
// resourceVersion (with bookmarks); when the watch ends it resumes from the last version seen, and
// on 410 Gone it re-lists and emits the difference. Objects are stored as slim projections (no
// managedFields, only the fields the driver reads), which is most of the agent's memory per sandbox.
// Our own writes are remembered until the watch catches up, so a read right after a create or
// delete never sees the older state and the driver never creates twice.
import { Watch, type KubeConfig, type KubernetesObject } from "@kubernetes/client-node";
import { LABEL } from "../../../schema/crd/labels.ts";
import { backoffMs, type Backoff } from "../../lib/work-queue.ts";

interface Written<T> {
  obj: T | null;
  rv: number;
}

type Verb = "add" | "update" | "delete";

export interface ObjectCacheOptions<T> {
  path: string;
  list: () => Promise<{ items: unknown[]; metadata?: { resourceVersion?: string } }>;
  labelSelector?: string;
  /** Projection kept in memory (must keep metadata.name, resourceVersion and labels). */
  slim: (raw: any) => T;
  onError?: (err: unknown) => void;
  /** A watch that delivers nothing (no event, no bookmark) for this long is ended and resumed
   * (client-node's default: 30 s; the API server sends a bookmark about once a minute). */
  watchTimeoutMs?: number;
}

const rvOf = (o: KubernetesObject | undefined | null): number => Number(o?.metadata?.resourceVersion ?? 0);
/** Watching again after a failed watch: 500 ms doubled per failure in a row, up to 10 s. */
const WATCH_BACKOFF: Backoff = { baseMs: 500, maxMs: 10_000 };
/** A list a fresh API server refuses while its storage initialises (429, 5xx): 100 ms doubling to 1 s. */
const LIST_BACKOFF: Backoff = { baseMs: 100, maxMs: 1000 };

export class ObjectCache<T extends KubernetesObject> {
  readonly #objects = new Map<string, T>();
  readonly #written = new Map<string, Written<T>>();
  /** sandbox-id label → object name (almost always one; a Set while a pod is being replaced). */
  readonly #byId = new Map<string, string | Set<string>>();
  readonly #listeners: ((obj: T, verb: Verb, old?: T) => void)[] = [];
  readonly #watch: Watch;
  readonly #o: ObjectCacheOptions<T>;
  #rv = "";
  #abort?: AbortController;
  #stopped = false;
  #started?: Promise<void>;
  /** Watches in a row that failed (reset by any event). */
  #failures = 0;
  /** Lists done (the first plus every re-list after 410). */
  lists = 0;

  constructor(kc: KubeConfig, opts: ObjectCacheOptions<T>) {
    this.#watch = new Watch(kc);
    // A public field of client-node 2.0.1's Watch that its typings declare private.
    if (opts.watchTimeoutMs) (this.#watch as unknown as { requestTimeoutMs: number }).requestTimeoutMs = opts.watchTimeoutMs;
    this.#o = opts;
  }

  /** Lists, then watches; resolves after the first list. A first list that failed for good (a 4xx
   * such as RBAC not granted yet, or retries spent) is not kept: the next start() lists again. */
  start(): Promise<void> {
    this.#started ??= this.#relist().then(
      () => this.#watchFrom(),
      (err: unknown) => {
        this.#started = undefined;
        throw err;
      },
    );
    return this.#started;
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    this.#abort?.abort();
  }

  /** `old`: the version held before an update (what the watch last delivered). */
  onChange(cb: (obj: T, verb: Verb, old?: T) => void): void {
    this.#listeners.push(cb);
  }

  /** Lists, retrying what a fresh API server answers while its storage initialises (429, 5xx). */
  async #listWithRetry(): ReturnType<ObjectCacheOptions<T>["list"]> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.#o.list();
      } catch (err) {
        const code = (err as { code?: number }).code ?? 0;
        if (this.#stopped || attempt >= 30 || (code !== 429 && code < 500 && code !== 0)) throw err;
        await new Promise((r) => setTimeout(r, backoffMs(attempt + 1, LIST_BACKOFF)));
      }
    }
  }

  async #relist(): Promise<void> {
    const list = await this.#listWithRetry();
    this.lists++;
    const fresh = new Map<string, T>();
    for (const raw of list.items) {
      const obj = this.#o.slim(raw);
      fresh.set(obj.metadata!.name!, obj);
    }
    for (const [name, old] of this.#objects) if (!fresh.has(name)) this.#remove(old);
    for (const obj of fresh.values()) this.#put(obj);
    this.#rv = list.metadata?.resourceVersion ?? "";
  }

  async #watchFrom(): Promise<void> {
    if (this.#stopped) return;
    let expired = false;
    const done = (err: unknown) => {
      if (this.#stopped) return;
      const code = (err as { statusCode?: number; code?: number } | null)?.statusCode ?? (err as { code?: number } | null)?.code;
      // A quiet watch ends after the client's inactivity bound (TimeoutError): resumed at once, as
      // is a watch the server closed. A failing one (refused, forbidden, unreachable) is resumed
      // later and later, never in a tight loop of requests.
      const failed = Boolean(err) && code !== 410 && (err as { name?: string }).name !== "TimeoutError";
      if (failed) this.#o.onError?.(err);
      this.#resume(expired || code === 410, failed ? backoffMs(++this.#failures, WATCH_BACKOFF) : 0);
    };
    try {
      this.#abort = await this.#watch.watch(
        this.#o.path,
        { resourceVersion: this.#rv, allowWatchBookmarks: true, labelSelector: this.#o.labelSelector },
        (phase: string, raw: any) => {
          if (phase === "ERROR") {
            if (raw?.code === 410) expired = true;
            return;
          }
          this.#failures = 0;
          if (raw?.metadata?.resourceVersion) this.#rv = raw.metadata.resourceVersion;
          if (phase === "BOOKMARK") return;
          const obj = this.#o.slim(raw);
          if (phase === "DELETED") this.#remove(obj);
          else this.#put(obj);
        },
        done,
      );
      // stop() while the watch was being opened aborted the previous one, not this one.
      if (this.#stopped) this.#abort.abort();
    } catch (err) {
      done(err);
    }
  }

  /** Watches again after `delayMs`, from a fresh list when the version expired; a failed list is
   * retried the same way (the cache never stops watching until stop()). */
  #resume(relist: boolean, delayMs: number): void {
    setTimeout(() => {
      if (this.#stopped) return;
      (relist ? this.#relist().then(() => this.#watchFrom()) : this.#watchFrom()).catch((err: unknown) => {
        this.#o.onError?.(err);
        this.#resume(true, backoffMs(++this.#failures, WATCH_BACKOFF));
      });
    }, delayMs);
  }

  #index(obj: T, add: boolean): void {
    const id = obj.metadata?.labels?.[LABEL.sandboxId];
    if (!id) return;
    const name = obj.metadata!.name!;
    const cur = this.#byId.get(id);
    const names = new Set(cur === undefined ? [] : typeof cur === "string" ? [cur] : cur);
    if (add) names.add(name);
    else names.delete(name);
    if (names.size === 0) this.#byId.delete(id);
    else this.#byId.set(id, names.size === 1 ? [...names][0]! : names);
  }

  #put(obj: T): void {
    const name = obj.metadata!.name!;
    const old = this.#objects.get(name);
    if (old && rvOf(old) > rvOf(obj)) return; // a re-list raced a newer watch event
    this.#objects.set(name, obj);
    this.#index(obj, true);
    const w = this.#written.get(name);
    if (w && rvOf(obj) >= w.rv) this.#written.delete(name);
    this.#emit(obj, old ? "update" : "add", old);
  }

  #remove(obj: T): void {
    const name = obj.metadata!.name!;
    const old = this.#objects.get(name);
    this.#objects.delete(name);
    if (old) this.#index(old, false);
    const w = this.#written.get(name);
    if (w && (w.obj === null || w.rv <= rvOf(obj))) {
      this.#written.delete(name);
      if (w.obj) this.#index(w.obj, false);
    }
    this.#emit(obj, "delete");
  }

  #emit(obj: T, verb: Verb, old?: T): void {
    for (const cb of this.#listeners) cb(obj, verb, old);
  }

  get(name: string): T | undefined {
    const w = this.#written.get(name);
    const seen = this.#objects.get(name);
    if (w && (!seen || rvOf(seen) < w.rv)) return w.obj ?? undefined;
    return seen;
  }

  /** Records the server's answer to our own create. */
  created(raw: unknown): T {
    return this.#record(this.#o.slim(raw));
  }

  /** Records the server's answer to our own update or patch, only while the cache still holds
   * that object (same name and uid). An answer can arrive after our delete or after the watch's
   * DELETED event (the write committed first, its answer came late); recorded then, it would bring
   * the object back for good (nothing later removes it) and every list() would count a ghost.
   * Returns the answer either way. */
  remember(raw: unknown): T {
    const obj = this.#o.slim(raw);
    const held = this.get(obj.metadata!.name!);
    if (!held || held.metadata?.uid !== obj.metadata?.uid) return obj;
    return this.#record(obj);
  }

  #record(obj: T): T {
    // Answers to two concurrent writes may arrive in either order: keep the newer one.
    const w = this.#written.get(obj.metadata!.name!);
    if (w?.obj && w.rv > rvOf(obj)) return w.obj;
    this.#written.set(obj.metadata!.name!, { obj, rv: rvOf(obj) });
    this.#index(obj, true);
    return obj;
  }

  /** Records our own delete: the object reads as gone at once. */
  forget(name: string): void {
    this.#written.set(name, { obj: null, rv: Number.MAX_SAFE_INTEGER });
  }

  list(): T[] {
    const names = new Set([...this.#objects.keys(), ...this.#written.keys()]);
    return [...names].map((n) => this.get(n)).filter((o): o is T => o !== undefined);
  }

  /** Objects carrying the sandbox-id label value `label`. */
  forSandbox(label: string): T[] {
    const cur = this.#byId.get(label);
    const names = cur === undefined ? [] : typeof cur === "string" ? [cur] : [...cur];
    return names.map((n) => this.get(n)).filter((o): o is T => o !== undefined && o.metadata?.labels?.[LABEL.sandboxId] === label);
  }

  /** Number of objects held. */
  get size(): number {
    return this.#objects.size;
  }
}
