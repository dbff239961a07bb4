// A namespace-scoped view of one resource kind, fed by a client-node informer (list, then watch
// from the list's resourceVersion; on 410 Gone it re-lists and emits the difference). Our own
// writes are remembered until the watch catches up, so a read right after a create or delete
// never sees the older state and the driver never creates twice.
import { makeInformer, type Informer, type KubeConfig, type KubernetesListObject, type KubernetesObject } from "@kubernetes/client-node";
import { LABEL } from "../../../schema/crd/labels.ts";

interface Written<T> {
  obj: T | null;
  rv: number;
}

const rvOf = (o: KubernetesObject | undefined | null): number => Number(o?.metadata?.resourceVersion ?? 0);

export class ObjectCache<T extends KubernetesObject> {
  readonly #objects = new Map<string, T>();
  readonly #written = new Map<string, Written<T>>();
  readonly #informer: Informer<T>;
  readonly #listeners: ((obj: T, verb: "add" | "update" | "delete") => void)[] = [];
  #started?: Promise<void>;

  constructor(kc: KubeConfig, path: string, list: () => Promise<KubernetesListObject<T>>, labelSelector?: string) {
    this.#informer = makeInformer(kc, path, list, labelSelector);
    const put = (verb: "add" | "update") => (obj: T) => {
      const name = obj.metadata!.name!;
      this.#objects.set(name, obj);
      const w = this.#written.get(name);
      if (w && rvOf(obj) >= w.rv) this.#written.delete(name);
      this.#emit(obj, verb);
    };
    this.#informer.on("add", put("add"));
    this.#informer.on("update", put("update"));
    this.#informer.on("delete", (obj) => {
      const name = obj.metadata!.name!;
      this.#objects.delete(name);
      const w = this.#written.get(name);
      if (w && (w.obj === null || w.rv <= rvOf(obj))) this.#written.delete(name);
      this.#emit(obj, "delete");
    });
    // Errors end the watch; the informer reconnects by itself, only a stop() ends it for good.
    this.#informer.on("error", () => {
      setTimeout(() => void this.#informer.start().catch(() => {}), 1000);
    });
  }

  start(): Promise<void> {
    this.#started ??= this.#informer.start();
    return this.#started;
  }

  async stop(): Promise<void> {
    await this.#informer.stop();
  }

  onChange(cb: (obj: T, verb: "add" | "update" | "delete") => void): void {
    this.#listeners.push(cb);
  }

  #emit(obj: T, verb: "add" | "update" | "delete"): void {
    for (const cb of this.#listeners) cb(obj, verb);
  }

  get(name: string): T | undefined {
    const w = this.#written.get(name);
    const seen = this.#objects.get(name);
    if (w && (!seen || rvOf(seen) < w.rv)) return w.obj ?? undefined;
    return seen;
  }

  /** Records the server's answer to our own create/update/patch. */
  remember(obj: T): T {
    this.#written.set(obj.metadata!.name!, { obj, rv: rvOf(obj) });
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

  /** Objects carrying the sandbox-id label `id`. */
  forSandbox(id: string): T[] {
    return this.list().filter((o) => o.metadata?.labels?.[LABEL.sandboxId] === id);
  }
}
