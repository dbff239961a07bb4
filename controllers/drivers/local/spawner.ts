// Forking from a small process instead of the agent.
//
// fork() copies the parent's page tables, so its cost grows with the parent's memory, and Node
// does it on the event loop thread; the agent is large (docs/decisions/spawner.md has the figures).
// The spawner is a plain Node process that loads nothing but Node's own modules:
// it forks on the agent's behalf and hands the pipes back as file descriptors, so output flows
// straight from the command to the agent. Terminals are relayed (node-pty keeps its master in
// the spawner), by a second spawner process of their own (#terminals says why).
//
// Lifetime: started on first use, restarted on the next spawn after it dies. Its death ends every
// command it started (enter.pl's parent-death signal) and each of them reports a clear error as
// its end; holders are not affected. It exits by itself when the agent does (IPC disconnect).
import { fork, type ChildProcess } from "node:child_process";
import { closeSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { connect } from "node:net";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Readable, Writable } from "node:stream";
import type { Socket } from "node:net";
import type { HostCommand } from "../../runtime/sandbox-view.ts";
import { inProcessLauncher, memoryTmpdir, ProcessStartError, spawnHost, type LaunchedExit, type LaunchedPipes, type LaunchedPty, type ProcessLauncher } from "../../runtime/process/launcher.ts";
import { makeSpawnerDir, sweepSpawnerDirs } from "./spawner-dirs.ts";
import { GIVE_UP_MS, PID_FILE_ENV, PID_FILE_WANTED, sandboxPidOf } from "./spawner-sandbox-pid.ts";
import { CONNECTION_ID_BYTES, openStdioFile, stopReading, type SpawnCommand, type SpawnerReply, type SpawnerRequest, type StdioSpec } from "./spawner-protocol.ts";

const MAIN = fileURLToPath(new URL("./spawner-main.ts", import.meta.url));

/** The spawner's code as one JavaScript file, built once per process (undefined: not yet). */
let bundled: string | undefined;

/**
 * What the spawner runs: its sources bundled into one JavaScript file (esbuild, ~60 ms once per
 * process, in a private directory of its own), or the .ts sources where that cannot be built (no
 * esbuild: a production install). Run from .ts, Node loads its TypeScript stripper, whose
 * WebAssembly memory (~10 MB, never given back) every fork then copies the page tables of: the
 * spawner's anonymous memory was 26 MB instead of ~7, and clone() took ~0.6 ms of kernel CPU per
 * command (issue 16). node-pty stays where it is installed (a native addon; imported on first use).
 */
function spawnerEntry(): string {
  if (bundled) return bundled;
  try {
    const require = createRequire(import.meta.url);
    const { buildSync } = require("esbuild") as typeof import("esbuild");
    const pty = require.resolve("@lydell/node-pty");
    const out = join(makeSpawnerDir(memoryTmpdir()), "spawner-main.mjs");
    buildSync({ entryPoints: [MAIN], outfile: out, bundle: true, platform: "node", format: "esm", target: "node22", alias: { "@lydell/node-pty": pty }, external: [pty], logLevel: "silent" });
    return (bundled = out);
  } catch {
    return (bundled = MAIN);
  }
}
/** Idle connections kept open to the spawner: a burst of this many / 2 commands starts without
 * waiting for new ones. */
const POOL = 32;

export interface SpawnedProcess {
  pid: number;
  /** The pipes asked for, by child fd number. */
  pipes: Map<number, Socket>;
  onExit(fn: (exit: LaunchedExit) => void): void;
  /** Stops tracking the process (a holder that outlives its start): it no longer keeps the agent
   * alive, and its exit fails nothing. `ended`, if given, still hears of its exit once
   * (`heard` true), or that nobody can tell any more (false: the spawner that started it died,
   * and the process, detached, outlives it; or it was forgotten and the exit not yet heard
   * when the Spawner was disposed). */
  forget(ended?: (heard: boolean) => void): void;
}

type WithoutId<T> = T extends unknown ? Omit<T, "id"> : never;

interface Tracked {
  resolve?: (p: { pid: number; pipes: number[] }) => void;
  reject?: (err: Error) => void;
  pid?: number;
  expected?: number[];
  pipes: Map<number, Socket>;
  exit?: LaunchedExit;
  exitFns: Array<(e: LaunchedExit) => void>;
  dataFns: Array<(d: Buffer) => void>;
  /** Terminal output that arrived before anyone listened (the start reply and the first output
   * can come in one read of the channel). */
  early: Buffer[];
}

/** Whether this process swept stale spawner directories yet (spawner-dirs.ts). */
let swept = false;

/** Forks in the calling process instead (for comparison: `KRUISE_LOCAL_SPAWNER=off`). */
export const IN_PROCESS = "in-process";
/** A spawner for terminals only (the one a Spawner starts on its first terminal). */
const TERMINALS = "terminals";

export class Spawner implements ProcessLauncher {
  readonly #inProcess: boolean;
  #child: ChildProcess | undefined;
  #ready: Promise<ChildProcess> | undefined;
  #nextId = 1;
  readonly #tracked = new Map<number, Tracked>();
  /** Forgotten processes whose exit someone still wants to hear of (SpawnedProcess.forget), by
   * request id: they keep nothing alive (a holder lives as long as its sandbox). */
  readonly #forgotten = new Map<number, (heard: boolean) => void>();
  #disposed = false;
  /** Requests waiting for the spawner to start. */
  #waiting = 0;
  /** Pooled connections to the current spawner, by id, and how many are being opened. */
  #pool = new Map<number, Socket>();
  #opening = 0;
  #nextConn = 1;
  #socketDir: string | undefined;
  /** Terminals run in a spawner process of their own, started on the first one: node-pty opens a
   * terminal's master without close-on-exec, and Node cannot set the flag, so every process the
   * spawner holding it starts afterwards inherits it: every later holder (a sandbox's `sleep`,
   * which root inside could take it from) of every tenant, and every command. The terminals'
   * spawner starts terminals only, each through enter.pl, which closes what it inherited. */
  #terminals: Spawner | undefined;
  readonly #terminalsOnly: boolean;

  constructor(mode?: typeof IN_PROCESS | typeof TERMINALS) {
    this.#inProcess = mode === IN_PROCESS;
    this.#terminalsOnly = mode === TERMINALS;
  }

  /** Starts the spawner process now instead of on the first spawn (~150 ms, more on a busy
   * machine), so the first sandbox does not wait for it. */
  warm(): void {
    if (this.#inProcess || this.#disposed) return;
    try {
      this.#start().catch(() => {});
    } catch {
      // the first spawn will report it
    }
  }

  /** A new path in the spawner's private directory (0700, in memory where possible), for a file
   * a process it starts writes and the caller reads and removes (a helper's stderr). */
  scratchFile(prefix: string): string {
    this.#socketDir ??= makeSpawnerDir(memoryTmpdir());
    return join(this.#socketDir, `${prefix}-${++this.#scratch}`);
  }
  #scratch = 0;

  /** The spawner's pid, once started (tests). */
  get pid(): number | undefined {
    return this.#child?.pid;
  }

  #start(): Promise<ChildProcess> {
    if (this.#ready) return this.#ready;
    // Once per process: the directories of agents that ended without disposing their spawner.
    if (!swept) {
      swept = true;
      void sweepSpawnerDirs(memoryTmpdir());
    }
    // A private directory (0700): only this user can connect and become some command's stdout,
    // or read the environment files of commands starting (in memory, see memoryTmpdir).
    this.#socketDir ??= makeSpawnerDir(memoryTmpdir());
    const socketPath = join(this.#socketDir, `${Date.now().toString(36)}.sock`);
    const child = fork(spawnerEntry(), [socketPath], {
      // Not the agent's flags (--cpu-prof, --inspect); small young generation, as in the runtime.
      // SBX_SPAWNER_NODE_ARGS adds flags of its own (the operator's: --cpu-prof for profiling).
      execArgv: ["--max-semi-space-size=1", "--disable-warning=ExperimentalWarning", ...(process.env.SBX_SPAWNER_NODE_ARGS?.split(" ").filter(Boolean) ?? [])],
      env: { ...process.env, MALLOC_ARENA_MAX: "2" },
      serialization: "advanced",
      // Not the agent's stdout: whoever reads it (a test runner) would wait for the spawner too.
      stdio: ["ignore", "ignore", "inherit", "ipc"],
    });
    this.#child = child;
    this.#ready = new Promise<ChildProcess>((resolve, reject) => {
      child.once("error", reject);
      child.once("exit", (code, signal) => reject(new ProcessStartError(`the process spawner exited during start (${signal ?? code})`)));
      child.on("message", (m: SpawnerReply, handle?: Socket) => {
        if (m.t === "ready") {
          // Terminals are relayed over the channel: no pooled connections for pipes.
          if (!this.#terminalsOnly) this.#fill(child, socketPath);
          resolve(child);
        } else this.#onReply(m, handle);
      });
    });
    this.#ready.catch(() => {});
    child.once("exit", (code, signal) => this.#lost(child, `the process spawner exited (${signal ?? `code ${code}`})`));
    this.#refresh();
    return this.#ready;
  }

  /** A dead spawner fails what it was starting and ends what it started, with a clear error. */
  #lost(child: ChildProcess, message: string): void {
    if (this.#child !== child) return;
    this.#child = undefined;
    this.#ready = undefined;
    this.#removeHandovers();
    for (const s of this.#pool.values()) s.destroy();
    this.#pool.clear();
    const tracked = [...this.#tracked.entries()];
    this.#tracked.clear();
    for (const [, t] of tracked) {
      if (t.reject) t.reject(new ProcessStartError(`${message}; the process was not started`));
      else this.#exited(t, { code: null, signal: null, error: `${message}; the process was killed` });
    }
    // Detached (holders): they outlive it, and the next spawner is not their parent.
    const forgotten = [...this.#forgotten.values()];
    this.#forgotten.clear();
    for (const fn of forgotten) fn(false);
  }

  /** Handover files (see launcher.ts) that commands of a dead spawner had no time to read: they
   * died with it. */
  #removeHandovers(): void {
    const dir = this.#socketDir;
    try {
      for (const f of dir ? readdirSync(dir) : []) if (f.startsWith("env-")) rmSync(join(dir!, f), { force: true });
    } catch {
      // disposed meanwhile: the directory went with everything in it
    }
  }

  #exited(t: Tracked, e: LaunchedExit): void {
    if (t.exit) return;
    t.exit = e;
    for (const fn of t.exitFns) fn(e);
    t.exitFns = [];
  }

  #onReply(m: SpawnerReply, handle: Socket | undefined): void {
    if (m.t === "ready") return;
    const t = this.#tracked.get(m.id);
    if (!t) {
      handle?.destroy();
      const ended = m.t === "exit" ? this.#forgotten.get(m.id) : undefined;
      if (ended) {
        this.#forgotten.delete(m.id);
        ended(true);
      }
      return;
    }
    switch (m.t) {
      case "spawned":
        t.pid = m.pid;
        t.expected = m.pipes;
        for (const [n, connId] of Object.entries(m.pooled ?? {})) {
          const s = this.#pool.get(connId);
          if (!s) {
            t.reject?.(new ProcessStartError(`the process spawner used an unknown connection for pipe ${n}`));
            continue;
          }
          this.#pool.delete(connId);
          s.ref();
          // Neither paused nor flowing: the consumer's first 'data' listener starts the reading.
          (s as { readableFlowing: boolean | null }).readableFlowing = null;
          t.pipes.set(Number(n), s);
          t.expected = [...t.expected, Number(n)];
        }
        if (m.pooled && this.#child) this.#fill(this.#child, undefined);
        break;
      case "fd":
        // Node starts reading a socket it receives: a command's output (or the end of an empty
        // one, which then closes before the runtime listens, and it waits its drain grace for
        // nothing) must wait for its consumer, as a pooled connection's does.
        if (handle && m.n > 0) holdForConsumer(handle);
        if (handle) t.pipes.set(m.n, handle);
        else t.reject?.(new ProcessStartError(`the process spawner lost pipe ${m.n}`));
        break;
      case "error":
        this.#tracked.delete(m.id);
        t.reject?.(new ProcessStartError(m.message));
        this.#refresh();
        return;
      case "data": {
        const data = Buffer.from(m.data.buffer, m.data.byteOffset, m.data.byteLength);
        if (t.dataFns.length === 0) t.early.push(data);
        for (const fn of t.dataFns) fn(data);
        return;
      }
      case "exit":
        this.#tracked.delete(m.id);
        this.#exited(t, { code: m.code, signal: m.signal });
        this.#refresh();
        return;
    }
    if (t.resolve && t.pid !== undefined && t.expected && t.expected.every((n) => t.pipes.has(n))) {
      const resolve = t.resolve;
      t.resolve = t.reject = undefined;
      resolve({ pid: t.pid, pipes: t.expected });
    }
  }

  #socketPath: string | undefined;

  /** Tops the pool of idle connections up to POOL. They never keep the agent alive. */
  #fill(child: ChildProcess, socketPath: string | undefined): void {
    if (socketPath) this.#socketPath = socketPath;
    const path = this.#socketPath;
    if (!path) return;
    while (this.#pool.size + this.#opening < POOL) {
      const id = this.#nextConn++;
      this.#opening++;
      const s = connect(path);
      // Paused before it connects, so Node never starts reading it: its first bytes and its end of
      // file belong to whoever consumes the child's pipe later.
      s.pause();
      s.unref();
      let connected = false;
      s.once("connect", () => {
        connected = true;
        this.#opening--;
        const head = Buffer.alloc(CONNECTION_ID_BYTES);
        head.writeUInt32BE(id);
        s.write(head);
        if (this.#child === child) this.#pool.set(id, s);
        else s.destroy();
      });
      s.on("error", () => {});
      s.once("close", () => {
        if (!connected) this.#opening--;
        else if (this.#pool.get(id) === s) this.#pool.delete(id);
      });
    }
  }

  /** The IPC channel keeps the agent alive only while something waits on the spawner. */
  #refresh(): void {
    const ch = this.#child?.channel as { ref(): void; unref(): void } | undefined;
    if (!ch) return;
    const busy = this.#tracked.size + this.#waiting > 0;
    if (busy) ch.ref();
    else ch.unref();
    if (busy) this.#child!.ref();
    else this.#child!.unref();
  }

  async #request(req: WithoutId<Extract<SpawnerRequest, { t: "spawn" | "pty" }>>): Promise<{ id: number; t: Tracked; pid: number }> {
    if (this.#disposed) throw new ProcessStartError("the process spawner was disposed");
    this.#waiting++;
    let child: ChildProcess;
    try {
      const starting = this.#start();
      this.#refresh();
      child = await starting;
    } finally {
      this.#waiting--;
    }
    const id = this.#nextId++;
    const t: Tracked = { pipes: new Map(), exitFns: [], dataFns: [], early: [] };
    const started = new Promise<{ pid: number }>((resolve, reject) => {
      t.resolve = resolve;
      t.reject = reject;
    });
    this.#tracked.set(id, t);
    this.#refresh();
    child.send({ ...req, id } as SpawnerRequest);
    const { pid } = await started;
    return { id, t, pid };
  }

  /** Starts a process with the given stdio; pipes come back as sockets. */
  async spawn(cmd: SpawnCommand, opts: { detached: boolean; stdio: StdioSpec[] }): Promise<SpawnedProcess> {
    if (this.#inProcess) return spawnHere(cmd, opts);
    const { id, t, pid } = await this.#request({ t: "spawn", ...cmd, ...opts });
    return {
      pid,
      pipes: t.pipes,
      onExit: (fn) => (t.exit ? fn(t.exit) : t.exitFns.push(fn)),
      forget: (ended) => {
        this.#tracked.delete(id);
        t.exitFns = [];
        if (ended && t.exit) ended(!t.exit.error);
        else if (ended && this.#child) this.#forgotten.set(id, ended);
        else ended?.(false);
        this.#refresh();
      },
    };
  }

  // The runtime's commands are enter.pl wrappers (local-view.ts): each reports the pid its
  // command has inside the sandbox in a file named here (spawner-sandbox-pid.ts). Holders (spawn)
  // and other host commands do not ask for one.
  async spawnPipes(host: HostCommand, stdin: boolean): Promise<LaunchedPipes> {
    if (host.env[PID_FILE_ENV] !== PID_FILE_WANTED) return this.#spawnPipes(host, stdin);
    const file = this.scratchFile("pid");
    return this.#withSandboxPid(file, () => this.#spawnPipes(reportingTo(host, file), stdin));
  }

  async spawnPty(host: HostCommand, size: { cols: number; rows: number }): Promise<LaunchedPty> {
    // Also with the spawner off (KRUISE_LOCAL_SPAWNER=off): a master in the agent would reach its
    // holders and build steps.
    if (!this.#terminalsOnly) {
      if (this.#disposed) throw new ProcessStartError("the process spawner was disposed");
      return (this.#terminals ??= new Spawner(TERMINALS)).spawnPty(host, size);
    }
    if (host.env[PID_FILE_ENV] !== PID_FILE_WANTED) return this.#spawnPty(host, size);
    const file = this.scratchFile("pid");
    return this.#withSandboxPid(file, () => this.#spawnPty(reportingTo(host, file), size));
  }

  /** Starts the wrapper and waits for its report. Without one the start fails: the host pid is
   * never what a client is told. */
  async #withSandboxPid<P extends LaunchedPipes | LaunchedPty>(file: string, start: () => Promise<P>): Promise<P> {
    let p: P;
    const ended: { exit?: LaunchedExit } = {};
    try {
      // There before the wrapper starts, so the wait can watch it (enter.pl truncates it).
      writeFileSync(file, "", { mode: 0o600 });
      p = await start();
      p.sandboxPid = await sandboxPidOf(file, new Promise((r) => p.onExit((e) => r((ended.exit = e)))));
    } finally {
      rmSync(file, { force: true });
    }
    if (p.sandboxPid !== undefined) return p;
    if ("stdout" in p) for (const s of [p.stdin, p.stdout, p.stderr]) s?.destroy();
    const exit = ended.exit;
    if (exit) throw new ProcessStartError(`the command could not enter the sandbox (${exit.error ?? `its wrapper exited with ${exit.signal ?? `code ${exit.code}`}`}); the sandbox may be stopping`);
    try {
      // Frozen (a paused sandbox's cgroup): the wrapper dies now (cgroup v2) or when thawed (v1),
      // and its child with it (parent-death signal).
      process.kill(p.pid, "SIGKILL");
    } catch {
      // ended just now
    }
    throw new ProcessStartError(`the command did not start in the sandbox within ${GIVE_UP_MS / 1000} s; the sandbox may be paused`);
  }

  async #spawnPipes(host: HostCommand, stdin: boolean): Promise<LaunchedPipes> {
    if (this.#inProcess) return inProcessLauncher.spawnPipes(host, stdin);
    const p = await this.spawn(host, { detached: true, stdio: [stdin ? "pipe" : "ignore", "pipe", "pipe"] });
    const stdinSocket = p.pipes.get(0);
    // Our end of the child's stdin is read only to see it close (then Node destroys it).
    stdinSocket?.resume();
    return { pid: p.pid, stdin: stdinSocket as Writable | undefined, stdout: p.pipes.get(1) as Readable, stderr: p.pipes.get(2) as Readable, onExit: p.onExit };
  }

  async #spawnPty(host: HostCommand, size: { cols: number; rows: number }): Promise<LaunchedPty> {
    if (this.#inProcess) return inProcessLauncher.spawnPty(host, size);
    const { id, t, pid } = await this.#request({ t: "pty", ...host, cols: size.cols, rows: size.rows });
    return {
      pid,
      onData: (fn) => {
        t.dataFns.push(fn);
        for (const d of t.early.splice(0)) fn(d);
      },
      onExit: (fn) => (t.exit ? fn(t.exit) : t.exitFns.push(fn)),
      write: (data) => this.#child?.send({ t: "write", id, data } satisfies SpawnerRequest),
      resize: (cols, rows) => this.#child?.send({ t: "resize", id, cols, rows } satisfies SpawnerRequest),
      pause: () => this.#child?.send({ t: "pause", id } satisfies SpawnerRequest),
      resume: () => this.#child?.send({ t: "resume", id } satisfies SpawnerRequest),
    };
  }

  /** Stops the spawner (its running commands end with it). */
  async dispose(): Promise<void> {
    this.#disposed = true;
    const terminals = this.#terminals?.dispose();
    for (const s of this.#pool.values()) s.destroy();
    this.#pool.clear();
    if (this.#socketDir) rmSync(this.#socketDir, { recursive: true, force: true });
    const child = this.#child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return void (await terminals);
    const exited = new Promise<void>((ok) => child.once("exit", () => ok()));
    // Held while it goes: an idle spawner is unref'd (#refresh), and a caller whose loop has
    // nothing else left (a script's last await) would otherwise end before 'exit' came.
    child.ref();
    child.disconnect();
    // It ends on the disconnect; one that missed it (spawner-main.ts's fallback needs its parent
    // gone, and this one waits) is killed rather than waited on for ever.
    const late = setTimeout(() => child.kill("SIGKILL"), DISPOSE_KILL_MS);
    await Promise.all([exited, terminals]);
    clearTimeout(late);
  }
}

/** How long dispose() waits for the spawner to end on its disconnect before killing it. */
const DISPOSE_KILL_MS = 5_000;

/** A received socket reads nothing until its consumer's first 'data' listener: Node started its
 * read as it made it (`read(0)`), and the stream would not start another while that one counts as
 * pending. */
function holdForConsumer(s: Socket): void {
  stopReading(s);
  (s as unknown as { _readableState: { reading: boolean } })._readableState.reading = false;
}

/** `host` with the report file named where its view asked for one. */
function reportingTo(host: HostCommand, file: string): HostCommand {
  return { ...host, env: { ...host.env, [PID_FILE_ENV]: file } };
}

async function spawnHere(cmd: SpawnCommand, opts: { detached: boolean; stdio: StdioSpec[] }): Promise<SpawnedProcess> {
  const files: number[] = [];
  let child: ChildProcess;
  try {
    // `same` names a pipe Node makes in this very call: none to give twice (see StdioSpec).
    const stdio = opts.stdio.map((s) => (typeof s === "string" ? s : "same" in s ? "ignore" : (files.push(openStdioFile(s)), files.at(-1)!)));
    child = spawnHost(cmd, { detached: opts.detached, stdio });
  } catch (err) {
    throw err instanceof ProcessStartError ? err : new ProcessStartError((err as Error).message);
  } finally {
    for (const fd of files) closeSync(fd);
  }
  if (child.pid === undefined) {
    const err = await new Promise<Error>((resolve) => child.once("error", resolve));
    throw new ProcessStartError(err.message);
  }
  const pipes = new Map<number, Socket>();
  child.stdio.forEach((s, n) => s && opts.stdio[n] === "pipe" && pipes.set(n, s as Socket));
  let exit: LaunchedExit | undefined;
  child.once("exit", (code, signal) => (exit = { code, signal }));
  child.unref();
  return {
    pid: child.pid,
    pipes,
    onExit: (fn) => (exit ? fn(exit) : child.once("exit", (code, signal) => fn({ code, signal }))),
    forget: (ended) => {
      child.removeAllListeners("exit");
      // This process is the parent: it hears of the exit for as long as it lives.
      if (ended && exit) ended(true);
      else if (ended) child.once("exit", () => ended(true));
    },
  };
}
