// One process started by Start: its pipes or pseudo-terminal, the streams attached to it, and
// its end once it exited. Output is not replayed: a stream sees what arrives after it attached.
import { spawn, type ChildProcess } from "node:child_process";
import type { Readable } from "node:stream";
import type { IPty } from "@lydell/node-pty";
import type { HostCommand } from "../sandbox-view.ts";
import { exitInfo, type EndInfo } from "./exit-status.ts";

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

export class ProcessStartError extends Error {}

export class ProcessHandle {
  readonly pid: number;
  readonly config: ProcessConfig;
  readonly tag: string | undefined;
  readonly isPty: boolean;
  readonly hasStdin: boolean;
  end: EndInfo | undefined;
  #listeners = new Set<(ev: ProcessOutput) => void>();
  #exitWaiters: Array<() => void> = [];
  #child: ChildProcess | undefined;
  #pty: IPty | undefined;

  private constructor(pid: number, config: ProcessConfig, tag: string | undefined, kind: { child?: ChildProcess; pty?: IPty; stdin: boolean }) {
    this.pid = pid;
    this.config = config;
    this.tag = tag;
    this.#child = kind.child;
    this.#pty = kind.pty;
    this.isPty = !!kind.pty;
    this.hasStdin = kind.stdin;
  }

  static async spawnPipes(host: HostCommand, config: ProcessConfig, tag: string | undefined, stdin: boolean): Promise<ProcessHandle> {
    const child = spawn(host.file, host.args, {
      cwd: host.cwd,
      env: host.env,
      uid: host.uid,
      gid: host.gid,
      // Own process group, so freeze and group signals reach its children too.
      detached: true,
      stdio: [stdin ? "pipe" : "ignore", "pipe", "pipe"],
    });
    if (child.pid === undefined) {
      const err = await new Promise<Error>((resolve) => child.once("error", resolve));
      throw new ProcessStartError(`failed to start process '${host.file}': ${err.message}`);
    }
    const h = new ProcessHandle(child.pid, config, tag, { child, stdin });
    child.stdin?.on("error", () => {});
    h.#pipe(child.stdout!, "stdout");
    h.#pipe(child.stderr!, "stderr");
    let closed = false;
    child.once("close", () => (closed = true));
    child.once("exit", (code, signal) => {
      const info = exitInfo(code, signal);
      if (closed) return h.#finish(info);
      const timer = setTimeout(() => {
        child.stdout?.destroy();
        child.stderr?.destroy();
        h.#finish(info);
      }, DRAIN_GRACE_MS);
      child.once("close", () => {
        clearTimeout(timer);
        h.#finish(info);
      });
    });
    return h;
  }

  static async spawnPty(host: HostCommand, config: ProcessConfig, tag: string | undefined, size: { cols: number; rows: number }): Promise<ProcessHandle> {
    // Loaded on first use: most sandboxes never open a terminal.
    const pty = (await import("@lydell/node-pty")).default;
    let term: IPty;
    try {
      term = pty.spawn(host.file, host.args, {
        name: host.env.TERM ?? "xterm-256color",
        cols: size.cols || 80,
        rows: size.rows || 24,
        cwd: host.cwd,
        env: host.env,
        uid: host.uid,
        gid: host.gid,
        encoding: null,
      });
    } catch (err) {
      throw new ProcessStartError(`failed to start pty '${host.file}': ${(err as Error).message}`);
    }
    const h = new ProcessHandle(term.pid, config, tag, { pty: term, stdin: true });
    // With encoding null node-pty hands out Buffers, typed as string.
    term.onData((d) => h.#emitChunks("pty", d as unknown as Buffer));
    term.onExit(({ exitCode, signal }) => h.#finish(exitInfo(exitCode, signal)));
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
    this.#child = undefined;
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

  exited(): Promise<void> {
    return this.end ? Promise.resolve() : new Promise((r) => this.#exitWaiters.push(r));
  }

  writeStdin(data: Uint8Array): void {
    const stdin = this.#child?.stdin;
    if (!stdin || stdin.destroyed || stdin.writableEnded) throw new Error("stdin is not open for this process");
    stdin.write(data);
  }

  writePty(data: Uint8Array): void {
    if (!this.#pty) throw new Error("process has no pty");
    this.#pty.write(Buffer.from(data) as unknown as string);
  }

  closeStdin(): void {
    const stdin = this.#child?.stdin;
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
    try {
      process.kill(this.pid, sig);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ESRCH") throw err;
    }
  }

  /** Signals the whole process group (freeze / thaw without a cgroup). */
  signalGroup(sig: NodeJS.Signals): void {
    if (this.end) return;
    try {
      process.kill(-this.pid, sig);
    } catch {
      this.signal(sig);
    }
  }
}
