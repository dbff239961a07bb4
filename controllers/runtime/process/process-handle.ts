// One process started by Start: its pipes or pseudo-terminal, the streams attached to it, and
// its end once it exited. Output is not replayed: a stream sees what arrives after it attached.
import { readFileSync } from "node:fs";
import type { Readable, Writable } from "node:stream";
import type { HostCommand } from "../sandbox-view.ts";
import { exitInfo, type EndInfo } from "./exit-status.ts";
import { inProcessLauncher, type LaunchedExit, type LaunchedPty, type ProcessLauncher } from "./launcher.ts";

export { ProcessStartError } from "./launcher.ts";

export type OutputStream = "stdout" | "stderr" | "pty";
export type ProcessOutput = { type: "data"; stream: OutputStream; data: Uint8Array } | { type: "end"; end: EndInfo };

export interface ProcessConfig {
  cmd: string;
  args: string[];
  envs: Record<string, string>;
  cwd?: string;
}

/** envd sends output in chunks of at most 32 KiB. */
const CHUNK = 32 * 1024;
/** After the process exits, how long to wait for its pipes to drain. A background child that
 * inherited stdout would otherwise hold the end event back for as long as it lives. */
const DRAIN_GRACE_MS = 200;

function endOf(exit: LaunchedExit): EndInfo {
  if (exit.error) return { exitCode: -1, exited: false, status: exit.error, error: exit.error };
  return exitInfo(exit.code, exit.signal);
}

export class ProcessHandle {
  /** The pid as the sandbox sees it: what clients are told and name the process by. */
  readonly pid: number;
  /** The host process the launcher started, which signals go to. */
  readonly hostPid: number;
  readonly config: ProcessConfig;
  readonly tag: string | undefined;
  readonly isPty: boolean;
  readonly hasStdin: boolean;
  end: EndInfo | undefined;
  #listeners = new Set<(ev: ProcessOutput) => void>();
  #exitWaiters: Array<() => void> = [];
  #stdin: Writable | undefined;
  #pty: LaunchedPty | undefined;
  /** Streams whose queues are full (event-stream.ts): while any is, output is not read, so the
   * command blocks on its full pipe or terminal, as under envd's blocking channel. */
  #holds = 0;
  #pauseOutput: (() => void) | undefined;
  #resumeOutput: (() => void) | undefined;
  #resumed: Array<() => void> = [];

  private constructor(pids: { pid: number; sandboxPid?: number }, config: ProcessConfig, tag: string | undefined, kind: { stdin?: Writable; pty?: LaunchedPty; hasStdin: boolean }) {
    this.pid = pids.sandboxPid ?? pids.pid;
    this.hostPid = pids.pid;
    this.config = config;
    this.tag = tag;
    this.#stdin = kind.stdin;
    this.#pty = kind.pty;
    this.isPty = !!kind.pty;
    this.hasStdin = kind.hasStdin;
  }

  static async spawnPipes(host: HostCommand, config: ProcessConfig, tag: string | undefined, stdin: boolean, launcher: ProcessLauncher = inProcessLauncher): Promise<ProcessHandle> {
    const p = await launcher.spawnPipes(host, stdin);
    const h = new ProcessHandle(p, config, tag, { stdin: p.stdin, hasStdin: stdin });
    h.#pauseOutput = () => (p.stdout.pause(), p.stderr.pause());
    h.#resumeOutput = () => (p.stdout.resume(), p.stderr.resume());
    p.stdin?.on("error", () => {});
    h.#pipe(p.stdout, "stdout");
    h.#pipe(p.stderr, "stderr");
    let open = 2;
    let exit: LaunchedExit | undefined;
    let timer: NodeJS.Timeout | undefined;
    const closed = () => {
      if (--open > 0 || !exit) return;
      clearTimeout(timer);
      h.#finish(endOf(exit));
    };
    p.stdout.once("close", closed);
    p.stderr.once("close", closed);
    p.onExit((e) => {
      exit = e;
      // As Node does for its own children: a background child holding the pipe must not keep it.
      p.stdin?.destroy();
      if (open === 0) return h.#finish(endOf(e));
      // The grace counts only while output is read: what a held stream has not taken yet is
      // still in the pipes, and is delivered when the client reads again.
      const grace = () => {
        if (h.#holds) return void h.#resumed.push(() => (timer = setTimeout(grace, DRAIN_GRACE_MS)));
        p.stdout.destroy();
        p.stderr.destroy();
        h.#finish(endOf(e));
      };
      timer = setTimeout(grace, DRAIN_GRACE_MS);
    });
    return h;
  }

  static async spawnPty(host: HostCommand, config: ProcessConfig, tag: string | undefined, size: { cols: number; rows: number }, launcher: ProcessLauncher = inProcessLauncher): Promise<ProcessHandle> {
    const term = await launcher.spawnPty(host, size);
    const h = new ProcessHandle(term, config, tag, { pty: term, hasStdin: true });
    h.#pauseOutput = term.pause && (() => term.pause!());
    h.#resumeOutput = term.resume && (() => term.resume!());
    term.onData((d) => h.#emitChunks("pty", d));
    term.onExit((e) => h.#finish(endOf(e)));
    return h;
  }

  #pipe(stream: Readable, name: OutputStream): void {
    stream.on("data", (d: Buffer) => this.#emitChunks(name, d));
    stream.on("error", () => {});
  }

  #emitChunks(stream: OutputStream, data: Buffer): void {
    for (let i = 0; i < data.length; i += CHUNK) {
      const ev: ProcessOutput = { type: "data", stream, data: data.subarray(i, i + CHUNK) };
      for (const l of this.#listeners) l(ev);
    }
  }

  #finish(info: EndInfo): void {
    if (this.end) return;
    this.end = info;
    const ev: ProcessOutput = { type: "end", end: info };
    for (const l of this.#listeners) l(ev);
    this.#listeners.clear();
    // Exited handles are retained 30 s for Connect; keep only the end, not the process objects.
    this.#stdin = undefined;
    this.#pty = undefined;
    for (const w of this.#exitWaiters) w();
    this.#exitWaiters = [];
  }

  /** Attaches a listener; an exited process delivers its end at once. Returns the detach. */
  subscribe(fn: (ev: ProcessOutput) => void): () => void {
    if (this.end) {
      fn({ type: "end", end: this.end });
      return () => {};
    }
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }

  /** Stops reading output until the returned release is called (once) by every holder. */
  hold(): () => void {
    if (this.#holds++ === 0) this.#pauseOutput?.();
    let released = false;
    return () => {
      if (released) return;
      released = true;
      if (--this.#holds > 0) return;
      this.#resumeOutput?.();
      for (const fn of this.#resumed.splice(0)) fn();
    };
  }

  exited(): Promise<void> {
    return this.end ? Promise.resolve() : new Promise((r) => this.#exitWaiters.push(r));
  }

  writeStdin(data: Uint8Array): void {
    const stdin = this.#stdin;
    if (!stdin || stdin.destroyed || stdin.writableEnded) throw new Error("stdin is not open for this process");
    stdin.write(data);
  }

  writePty(data: Uint8Array): void {
    if (!this.#pty) throw new Error("process has no pty");
    this.#pty.write(Buffer.from(data));
  }

  closeStdin(): void {
    const stdin = this.#stdin;
    if (!stdin) throw new Error(this.isPty ? "cannot close stdin of a pty process, send Ctrl+D instead" : "stdin is not open for this process");
    stdin.end();
  }

  resize(cols: number, rows: number): void {
    if (!this.#pty) throw new Error("process has no pty");
    // node-pty throws (and only logs) when resizing a terminal that already exited.
    if (this.end) return;
    this.#pty.resize(cols, rows);
  }

  signal(sig: NodeJS.Signals): void {
    if (this.end) return;
    // A wrapper that forked into the sandbox (pid ≠ hostPid) cannot forward SIGKILL, and killing
    // it orphans the command to the host's pid 1, which reaps it seconds later (a zombie the
    // sandbox still sees). Kill the command itself: the wrapper reaps it at once and then ends
    // with the same signal, so the exit status reads the same.
    const targets = sig === "SIGKILL" && this.pid !== this.hostPid ? childrenOf(this.hostPid) : [];
    for (const pid of targets.length ? targets : [this.hostPid]) {
      try {
        process.kill(pid, sig);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "ESRCH") throw err;
      }
    }
  }

  /** Signals the whole process group (freeze / thaw without a cgroup). */
  signalGroup(sig: NodeJS.Signals): void {
    if (this.end) return;
    try {
      process.kill(-this.hostPid, sig);
    } catch {
      this.signal(sig);
    }
  }
}

function childrenOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(" ").filter(Boolean).map(Number);
  } catch {
    return [];
  }
}
