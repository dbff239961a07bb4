// Work queued per key runs one item after another (items about one object keep their order), and
// different keys run concurrently. Used by the edge (ClusterDO's CRD sync) and the agent (the
// kubernetes driver's writes per sandbox); plain promises, so it runs in workerd and Node alike.

export class KeyedSerial {
  readonly #chains = new Map<string, Promise<void>>();

  /** Runs `work` after everything queued under `key`; a failure does not stop the chain. */
  run<T>(key: string, work: () => Promise<T>): Promise<T> {
    const next = (this.#chains.get(key) ?? Promise.resolve()).then(work);
    const tail = next.then(
      () => {},
      () => {},
    );
    this.#chains.set(key, tail);
    void tail.then(() => {
      if (this.#chains.get(key) === tail) this.#chains.delete(key);
    });
    return next;
  }

  /** Resolves once no key has work queued or running (work queued meanwhile is waited for too). */
  async idle(): Promise<void> {
    while (this.#chains.size > 0) await Promise.all(this.#chains.values());
  }

  /** Keys with work queued or running. */
  get size(): number {
    return this.#chains.size;
  }
}
