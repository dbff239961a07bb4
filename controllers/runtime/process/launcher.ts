// How a host command becomes a running process. The runtime forks it itself by default; a view
// may hand it to a launcher elsewhere (the local driver's spawner process, see
// controllers/drivers/local/spawner.ts), because fork() from a large process is slow and blocks
// its event loop for the whole copy of its page tables.
import { spawn } from "node:child_process";
import type { Readable, Writable } from "node:stream";
import type { HostCommand } from "../sandbox-view.ts";

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
}

export interface ProcessLauncher {
  /** Starts `host` in its own process group with piped stdout/stderr (and stdin when asked). */
  spawnPipes(host: HostCommand, stdin: boolean): Promise<LaunchedPipes>;
  spawnPty(host: HostCommand, size: { cols: number; rows: number }): Promise<LaunchedPty>;
}

export class ProcessStartError extends Error {}

/** Forks in this process. */
export const inProcessLauncher: ProcessLauncher = {
  async spawnPipes(host, stdin) {
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

/** node-pty in this process (the spawner process uses it too). Loaded on first use: most
 * sandboxes never open a terminal. */
export async function spawnPtyHere(host: HostCommand, size: { cols: number; rows: number }): Promise<LaunchedPty> {
  const pty = (await import("@lydell/node-pty")).default;
  let term;
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
  const t = term;
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
  };
}
