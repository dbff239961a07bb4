// The processes of one sandbox, by pid and tag. Exited processes stay reachable for Connect for
// 30 s (as envd), so a client that reconnects just after the exit still gets the end event.
// No Connect import here: the table is built with every sandbox before the server listens, and
// @connectrpc/connect's errors pull in protobuf's registry (over half of the start-up's CPU);
// select.ts turns a failed lookup into the RPC's error.
import type { ProcessHandle } from "./process-handle.ts";

const RETAIN_EXITED_MS = 30_000;

export type Selector = { case: "pid"; value: number } | { case: "tag"; value: string } | { case: undefined; value?: undefined };

export class ProcessTable {
  #byPid = new Map<number, ProcessHandle>();

  add(h: ProcessHandle): void {
    // A process that ended before its sandbox pid was known carries its host pid, which may equal
    // a live process's sandbox pid: the live one keeps it.
    const held = this.#byPid.get(h.pid);
    if (held && !held.end && h.pid === h.hostPid && held.pid !== held.hostPid) return;
    this.#byPid.set(h.pid, h);
    void h.exited().then(() => {
      const t = setTimeout(() => {
        if (this.#byPid.get(h.pid) === h) this.#byPid.delete(h.pid);
      }, RETAIN_EXITED_MS);
      t.unref();
    });
  }

  /** Looks up by selector; `live` excludes retained exited processes. */
  find(sel: Selector | undefined, opts: { live?: boolean } = {}): ProcessHandle | { missing: "selector" | "process"; message: string } {
    let h: ProcessHandle | undefined;
    if (sel?.case === "pid") h = this.#byPid.get(sel.value);
    else if (sel?.case === "tag") h = [...this.#byPid.values()].find((p) => p.tag === sel.value && !p.end);
    else return { missing: "selector", message: "process selector is required" };
    if (!h || (opts.live && h.end)) {
      const what = sel.case === "pid" ? `pid ${sel.value}` : `tag ${sel.value}`;
      return { missing: "process", message: `process with ${what} not found` };
    }
    return h;
  }

  live(): ProcessHandle[] {
    return [...this.#byPid.values()].filter((p) => !p.end);
  }

  killAll(): void {
    for (const p of this.live()) p.signalGroup("SIGKILL");
  }
}
