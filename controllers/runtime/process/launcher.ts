// How a host command becomes a running process. The runtime forks it itself by default; a view
// may hand it to a launcher elsewhere (the local driver's spawner process, see
// controllers/drivers/local/spawner.ts), because fork() from a large process is slow and blocks
// its event loop for the whole copy of its page tables.
//
// A wrapper that enters a sandbox with host privileges must not see the command's environment
// (perl, the loader and shells run code named in PERL5OPT, LD_PRELOAD, BASH_ENV...), so a host
// command may carry it apart (`sandboxEnv`): every launcher writes it to a private file and gives
// the wrapper only that file's path, and the wrapper sets it just before its exec.
import { spawn, type ChildProcess, type StdioOptions } from "node:child_process";
import { accessSync, constants, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Readable, Writable } from "node:stream";
import type { HostCommand } from "../sandbox-view.ts";
import { mastersOpen, stdioWithoutMasters, throughCloser, trackMaster, userSwitch } from "./terminal-masters.ts";

/** How a process ended. `error` is set when the launcher lost track of it (its spawner died). */
export interface LaunchedExit {
  code: number | null;
  signal: NodeJS.Signals | number | null;
  error?: string;
}

/** `pid` is the host process the launcher started: signals go there. `sandboxPid` is the pid the
 * command has inside the sandbox when the two differ (a launcher whose wrapper forks into the
 * sandbox's pid namespace): clients see and name processes by it, as envd inside a VM reports
 * the pid the sandbox sees. Absent where they agree (the runtime forking on the host or in a pod). */
export interface LaunchedPipes {
  pid: number;
  sandboxPid?: number;
  stdin?: Writable;
  stdout: Readable;
  stderr: Readable;
  /** Called once, when the process has exited. */
  onExit(fn: (exit: LaunchedExit) => void): void;
}

/** The part of node-pty's IPty the runtime uses; data arrives as Buffers. */
export interface LaunchedPty {
  pid: number;
  sandboxPid?: number;
  onData(fn: (data: Buffer) => void): void;
  onExit(fn: (exit: LaunchedExit) => void): void;
  write(data: Buffer): void;
  resize(cols: number, rows: number): void;
  /** Stop and restart reading the terminal (backpressure); absent where the launcher cannot. */
  pause?(): void;
  resume?(): void;
}

export interface ProcessLauncher {
  /** Starts `host` in its own process group with piped stdout/stderr (and stdin when asked). */
  spawnPipes(host: HostCommand, stdin: boolean): Promise<LaunchedPipes>;
  spawnPty(host: HostCommand, size: { cols: number; rows: number }): Promise<LaunchedPty>;
}

export class ProcessStartError extends Error {}

/** Stands in `HostCommand.args` for the path of the file that carries `sandboxEnv`. No real
 * argument can contain NUL, so none is ever taken for it. */
export const SANDBOX_ENV_FILE = "\0sandbox-env-file";

/** `env` as the handover file holds it: `NAME=value` entries, each ended by NUL. What neither
 * that file nor execve could carry unambiguously is refused. */
export function encodeEnv(env: Record<string, string>): Buffer {
  let text = "";
  for (const [name, value] of Object.entries(env)) {
    if (name === "" || name.includes("=") || name.includes("\0")) throw new ProcessStartError(`invalid environment variable name ${JSON.stringify(name)}: empty, or holds '=' or NUL`);
    if (value.includes("\0")) throw new ProcessStartError(`environment variable ${name}: a value cannot hold NUL`);
    text += `${name}=${value}\0`;
  }
  return Buffer.from(text);
}

/** Where short-lived private files go: /dev/shm (tmpfs) where there is one, else the temp dir.
 * A handover file in /tmp on this machine's ext4 cost 420-570 µs to write and unlink under load,
 * 115-150 µs on tmpfs. */
export function memoryTmpdir(): string {
  try {
    accessSync("/dev/shm", constants.W_OK);
    return "/dev/shm";
  } catch {
    return tmpdir();
  }
}

/** Where the handover files of this process go unless its launcher names a directory: a private
 * (0700) one, made on first use. */
let ownEnvDir: string | undefined;
function envDirOfThisProcess(): string {
  if (ownEnvDir) return ownEnvDir;
  const dir = mkdtempSync(join(memoryTmpdir(), "kruise-env-"));
  process.once("exit", () => rmSync(dir, { recursive: true, force: true }));
  return (ownEnvDir = dir);
}
let handovers = 0;

/** The args to start `host` with: `sandboxEnv`, if any, written to a new 0600 file in `dir` and
 * that file's path in place of SANDBOX_ENV_FILE. The wrapper unlinks the file first thing;
 * `release` removes it in case the wrapper never ran. */
export function handOver(host: HostCommand, dir: () => string = envDirOfThisProcess): { args: string[]; release: () => void } {
  if (!host.sandboxEnv) return { args: host.args, release: () => {} };
  const at = host.args.indexOf(SANDBOX_ENV_FILE);
  if (at < 0) throw new ProcessStartError(`${host.file}: the command has an environment to hand over but no argument for its file`);
  const data = encodeEnv(host.sandboxEnv);
  const path = join(dir(), `env-${process.pid}-${++handovers}`);
  writeFileSync(path, data, { flag: "wx", mode: 0o600 });
  const args = host.args.slice();
  args[at] = path;
  return { args, release: () => rmSync(path, { force: true }) };
}

/** Where a launcher puts handover files, and what it adds to the wrapper's own environment. */
export interface HandoverOptions {
  envDir?: () => string;
  env?: Record<string, string>;
}

/** child_process.spawn of a host command, its environment handed over (see handOver). It holds
 * no terminal master of this process (terminal-masters.ts). */
export function spawnHost(host: HostCommand, opts: { detached: boolean; stdio: StdioOptions } & HandoverOptions): ChildProcess {
  const h = handOver(host, opts.envDir);
  let child: ChildProcess;
  try {
    child = spawn(host.file, h.args, { cwd: host.cwd, env: { ...host.env, ...opts.env }, uid: host.uid, gid: host.gid, detached: opts.detached, stdio: stdioWithoutMasters(opts.stdio) });
  } catch (err) {
    h.release();
    throw err;
  }
  child.once("exit", h.release).once("error", h.release);
  return child;
}

/** Forks in this process. */
export const inProcessLauncher: ProcessLauncher = {
  async spawnPipes(host, stdin) {
    // Own process group, so freeze and group signals reach its children too.
    const child = spawnHost(host, { detached: true, stdio: [stdin ? "pipe" : "ignore", "pipe", "pipe"] });
    if (child.pid === undefined) {
      const err = await new Promise<Error>((resolve) => child.once("error", resolve));
      throw new ProcessStartError(`failed to start process '${host.file}': ${err.message}`);
    }
    // Kept from the start: a caller that awaits something before it asks (a wrapping launcher
    // looking up the sandbox pid) must not miss an early exit.
    let exit: LaunchedExit | undefined;
    child.once("exit", (code, signal) => (exit = { code, signal }));
    return {
      pid: child.pid,
      stdin: child.stdin ?? undefined,
      stdout: child.stdout!,
      stderr: child.stderr!,
      onExit: (fn) => (exit ? fn(exit) : child.once("exit", (code, signal) => fn({ code, signal }))),
    };
  },

  async spawnPty(host, size) {
    return spawnPtyHere(host, size);
  },
};

/** Options of spawnPtyHere beyond the handover's. */
export interface PtyOptions extends HandoverOptions {
  /** The command is a wrapper that closes every descriptor it inherited before anything else and
   * switches user itself (the local driver's enter.pl): it needs no closer. */
  closesInherited?: boolean;
}

/** node-pty in this process (the spawner process uses it too). Loaded on first use: most
 * sandboxes never open a terminal. A terminal that changes user, or is started while another is
 * open here, is exec'd through a closer that holds none of their masters when it runs anything of
 * the command's and switches user itself (terminal-masters.ts). */
export async function spawnPtyHere(host: HostCommand, size: { cols: number; rows: number }, opts: PtyOptions = {}): Promise<LaunchedPty> {
  const pty = (await import("@lydell/node-pty")).default;
  // node-pty sets TERM in the environment it starts; the command's is the one that needs it.
  const name = (host.sandboxEnv ?? host.env).TERM ?? "xterm-256color";
  let spawned = host.sandboxEnv ? { ...host, sandboxEnv: { ...host.sandboxEnv, TERM: name } } : host;
  let env = { ...host.env, ...opts.env };
  const as = opts.closesInherited ? undefined : userSwitch(host);
  if (as || (mastersOpen() > 0 && !opts.closesInherited)) {
    // What node-pty would have set in the command's own environment (the closer's is renamed).
    spawned = throughCloser(spawned, { ...env, PWD: host.cwd, TERM: name }, as);
    env = spawned.env;
  }
  const h = handOver(spawned, opts.envDir);
  let term;
  let closed: () => void;
  try {
    term = pty.spawn(spawned.file, h.args, {
      name,
      cols: size.cols || 80,
      rows: size.rows || 24,
      cwd: host.cwd,
      env,
      uid: spawned.uid,
      gid: spawned.gid,
      encoding: null,
    });
    closed = trackMaster((term as unknown as { _fd?: unknown })._fd);
  } catch (err) {
    term?.kill("SIGKILL");
    h.release();
    throw new ProcessStartError(`failed to start pty '${host.file}': ${(err as Error).message}`);
  }
  const t = term;
  t.onExit(h.release);
  // node-pty reports the exit once the master is closed (its read stream's 'close').
  t.onExit(closed);
  // Held from the start (node-pty drops events nobody listens to yet), for a caller that awaits
  // something before it subscribes.
  const early: Buffer[] = [];
  const dataFns: Array<(d: Buffer) => void> = [];
  let exit: LaunchedExit | undefined;
  const exitFns: Array<(e: LaunchedExit) => void> = [];
  // With encoding null node-pty hands out Buffers, typed as string.
  t.onData((d) => (dataFns.length ? dataFns.forEach((fn) => fn(d as unknown as Buffer)) : early.push(d as unknown as Buffer)));
  t.onExit(({ exitCode, signal }) => {
    exit = { code: exitCode, signal: signal || null };
    for (const fn of exitFns.splice(0)) fn(exit);
  });
  return {
    pid: t.pid,
    onData: (fn) => {
      dataFns.push(fn);
      for (const d of early.splice(0)) fn(d);
    },
    onExit: (fn) => (exit ? fn(exit) : void exitFns.push(fn)),
    write: (data) => t.write(data as unknown as string),
    resize: (cols, rows) => t.resize(cols, rows),
    pause: () => t.pause(),
    resume: () => t.resume(),
  };
}
