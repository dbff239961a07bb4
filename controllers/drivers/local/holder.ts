// The holder: one small long-lived process per sandbox that owns its namespaces (bubblewrap, whose
// pid 1 inside is the host's init program, sandbox-init.ts; a holder started before it, or on a CPU
// it has no image for, has bubblewrap's own pid 1 plus `sleep infinity`), or at `process` level
// just marks that the sandbox exists.
// Holders are started in their own session and are not tied to the agent's lifetime
// (no --die-with-parent), so an agent restart keeps sandboxes running; the next agent finds them
// through the records and /proc.
// bwrap reads its options from a file descriptor (`--args`), not its command line: its pid 1
// inside the sandbox keeps bwrap's argv, which every process there can read, and the mounts name
// host paths.
import { closeSync, openSync, readFileSync, readSync, readdirSync, readlinkSync, rmSync, statSync, writeFileSync } from "node:fs";
import type { Socket } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { helperEnv, lastLine } from "./host-helpers.ts";
import { MARKER_ENV } from "./local-view.ts";
import { fieldsEnded, PF_EXITING, statFieldsIn } from "./proc-handle.ts";
import type { ProcRef } from "./records.ts";
import type { SpawnedProcess, Spawner } from "./spawner.ts";
import type { StdioSpec } from "./spawner-protocol.ts";

const SLEEP = "/usr/bin/sleep";
const SETPRIV = "/usr/bin/setpriv";
const INFO_FD = 3;
const ARGS_FD = 4;
const USERNS_FD = 5;
/** Joins the cgroups listed in $KRUISE_CGROUPS before exec, so no process of the sandbox ever
 * runs outside them. The sandbox's pid 1 keeps the environment it execs with, and every process
 * inside can read it: the host paths (cgroups, the sandbox's directory in PWD) and the spawner's
 * pid go first. */
const JOIN_SHIM = 'IFS=:; for f in $KRUISE_CGROUPS; do echo $$ > "$f" || exit 125; done; unset KRUISE_CGROUPS KRUISE_PARENT_PID PWD; exec "$@"';

export function procStart(pid: number): string | undefined {
  return statFields(pid)?.[19]; // start time: field 22 overall
}

/** The kernel's `/proc/<pid>/stat` fields after the command name (proc-handle.ts statFieldsIn),
 * or undefined for a process that is gone. */
function statFields(pid: number): string[] | undefined {
  try {
    return statFieldsIn(readFileSync(`/proc/${pid}/stat`, "latin1"));
  } catch {
    return undefined;
  }
}

export function procRef(pid: number): ProcRef | undefined {
  const start = procStart(pid);
  return start === undefined ? undefined : { pid, start };
}

/** What the kernel says of a live process: its seccomp mode (`/proc/<pid>/status`: 0 none,
 * 1 strict, 2 filter) and, given the init's file, whether it runs that init (runsFile: not its
 * `Name:`, which an older holder's pid 1, a bwrap that root inside can ptrace, could set with
 * PR_SET_NAME); undefined when it is gone (or a reused pid: `ref.start` no longer matches).
 * Read by the host's root without ptrace rights (the init is not dumpable). */
export function holderStatus(ref: ProcRef, init?: string): { seccomp: number; init: boolean } | undefined {
  // The driver wrote it at its start; were it gone, no process would run it.
  const want = init === undefined ? undefined : statSync(init, { throwIfNoEntry: false });
  try {
    const status = readFileSync(`/proc/${ref.pid}/status`, "utf8");
    const runsInit = want !== undefined && runsFile(ref.pid, want);
    if (procStart(ref.pid) !== ref.start) return undefined;
    const seccomp = /^Seccomp:\s*(\d+)$/m.exec(status);
    return seccomp ? { seccomp: Number(seccomp[1]), init: runsInit } : undefined;
  } catch {
    return undefined;
  }
}

/** Whether `pid` runs `file`: its `/proc/<pid>/exe` is the same inode (the kernel's link names it
 * by a path of the host's, which a pivoted mount namespace may show otherwise; a process cannot
 * change it without CAP_SYS_RESOURCE in the initial user namespace). False when it is gone. */
export function runsFile(pid: number, file: { dev: number; ino: number }): boolean {
  try {
    const exe = statSync(`/proc/${pid}/exe`);
    return exe.ino === file.ino && exe.dev === file.dev;
  } catch {
    return false;
  }
}

/** One `/proc/<pid>/stat` read: the start time, the state (a zombie, Z, or dead, X, has ended)
 * and the flags (an exiting one, PF_EXITING, runs nothing more) come from the same line. */
export function alive(ref: ProcRef | undefined): boolean {
  if (!ref) return false;
  const fields = statFields(ref.pid);
  return fields !== undefined && fields[19] === ref.start && !fieldsEnded(fields);
}

/** Enough of `/proc/<pid>/stat` for the state and the flags (field 9): a pid, a command name of at
 * most 15 bytes and six numbers. Shared: reads are synchronous. */
const STAT_HEAD = Buffer.alloc(128);
const CLOSE_PAREN = 0x29;
const SPACE = 0x20;

/**
 * A running process's `/proc/<pid>/stat`, opened once (its start checked then) and kept: the
 * descriptor stays bound to that process, so once it is reaped every read fails (ESRCH), whoever
 * has the pid then. A look (`ended`) is one pread of the line's head, no string made: a zombie
 * (Z), a dead (X) or an exiting (PF_EXITING) process has ended, as in `alive`.
 */
export class StatHandle {
  readonly ref: ProcRef;
  #fd: number | undefined;

  private constructor(ref: ProcRef, fd: number) {
    this.ref = ref;
    this.#fd = fd;
  }

  /** The handle of `ref` while it runs; undefined when it has ended or the pid is another's. */
  static open(ref: ProcRef): StatHandle | undefined {
    let fd: number;
    try {
      fd = openSync(`/proc/${ref.pid}/stat`, "r");
    } catch {
      return undefined;
    }
    // Checked through the descriptor itself: the process it names is the one recorded.
    const h = new StatHandle(ref, fd);
    if (!h.ended() && statFieldsOf(fd)?.[19] === ref.start) return h;
    h.close();
    return undefined;
  }

  ended(): boolean {
    if (this.#fd === undefined) return true;
    let n: number;
    try {
      n = readSync(this.#fd, STAT_HEAD, 0, STAT_HEAD.length, 0);
    } catch {
      return true;
    }
    const paren = STAT_HEAD.lastIndexOf(CLOSE_PAREN, n - 1);
    if (paren < 0 || paren + 2 >= n) return true;
    const state = STAT_HEAD[paren + 2];
    if (state === 0x5a /* Z */ || state === 0x58 /* X */) return true;
    // The flags: the 6th field after the state (fields[6] of statFields).
    let at = paren + 2;
    for (let spaces = 0; spaces < 6 && at < n; at++) if (STAT_HEAD[at] === SPACE) spaces++;
    let flags = 0;
    for (; at < n && STAT_HEAD[at]! >= 0x30 && STAT_HEAD[at]! <= 0x39; at++) flags = flags * 10 + STAT_HEAD[at]! - 0x30;
    return (flags & PF_EXITING) !== 0;
  }

  close(): void {
    if (this.#fd !== undefined) closeSync(this.#fd);
    this.#fd = undefined;
  }
}

/** `statFields`, read through an open descriptor. */
function statFieldsOf(fd: number): string[] | undefined {
  try {
    const buf = Buffer.alloc(1024);
    return statFieldsIn(buf.toString("latin1", 0, readSync(fd, buf, 0, buf.length, 0)));
  } catch {
    return undefined;
  }
}

export interface StartedHolder {
  holder: ProcRef;
  nsInit: ProcRef;
}

export interface HolderSpec {
  id: string;
  /** The record's holderNonce, put in the holder's environment (HOLDER_NONCE_ENV). */
  nonce?: string;
  /** bwrap arguments (namespaces and mounts) before `--`; undefined at `process` level. */
  bwrapArgs?: string[];
  cgroupProcs: string[];
  cwd: string;
  log: string;
  /** Runs as soon as the sandbox's pid 1 exists (its namespaces do), alongside bwrap's mounts;
   * the start waits for it. */
  onNamespaces?: (nsInit: ProcRef) => Promise<void>;
  /** Start inside this user namespace (userns.ts): bwrap runs as its owner, the range's first host
   * uid, with no capability on the host, and creates the sandbox's namespaces inside it. */
  userns?: { nsPath: string; owner: number };
  /** The seccomp program file (seccomp.ts) bwrap loads into the sandbox's pid 1 (`--seccomp`). */
  seccomp?: string;
  /** The init program's file (sandbox-init.ts; the driver writes it): bwrap execs it as the
   * sandbox's pid 1 (`--as-pid-1`). Without it, bwrap's own pid 1 runs `sleep infinity`. */
  init?: string;
  /** Once started, told when the holder exits (`heard` true: at `bwrap` levels it exits after its
   * pid 1, at `process` level it is pid 1), or that nobody can tell any more (false: the spawner
   * that started it died). Called at most once, possibly before startHolder's promise settles
   * (an exit right after the start). */
  onEnd?: (heard: boolean) => void;
}

/** bwrap as the user namespace's owner: it joins the namespace (`--userns`) and so holds
 * capabilities only there. Its bind sources (under the root-only data directory, which that uid
 * may not traverse) come as descriptors the spawner opened as root (`--bind-fd`). */
function inUserns(bwrapArgs: string[], owner: number): { setpriv: string[]; args: string[]; fds: string[] } {
  const args: string[] = ["--userns", String(USERNS_FD)];
  const fds: string[] = [];
  for (let i = 0; i < bwrapArgs.length; i++) {
    const a = bwrapArgs[i]!;
    if ((a === "--bind" || a === "--ro-bind") && i + 2 < bwrapArgs.length) {
      fds.push(bwrapArgs[i + 1]!);
      args.push(`${a}-fd`, String(USERNS_FD + fds.length), bwrapArgs[i + 2]!);
      i += 2;
    } else {
      args.push(a);
    }
  }
  return { setpriv: [SETPRIV, `--reuid=${owner}`, `--regid=${owner}`, "--clear-groups"], args, fds };
}

/** Starts the holder (forked by `spawner`) and waits until the sandbox is ready for processes to join. */
export async function startHolder(spec: HolderSpec, spawner: Spawner): Promise<StartedHolder> {
  const env = helperEnv({ [MARKER_ENV]: spec.id, ...(spec.nonce ? { [HOLDER_NONCE_ENV]: spec.nonce } : {}), KRUISE_CGROUPS: spec.cgroupProcs.join(":") });
  const ns = spec.bwrapArgs && spec.userns ? inUserns(spec.bwrapArgs, spec.userns.owner) : undefined;
  const bwrapArgs = ns?.args ?? spec.bwrapArgs;
  const asPid1 = spec.init && bwrapArgs ? ["--as-pid-1"] : [];
  // NUL-terminated, as bwrap reads them (to the end; then it closes the fd). A file, not a pipe:
  // the sockets Node gives a child as extra fds are non-blocking, and bwrap does not wait on them.
  // In the spawner's private directory, never beside the log: that is on the sandbox's disk, which
  // its tenant may have filled (mkfs -m 0 keeps no blocks for root), and a new file there would
  // make every later start fail with ENOSPC.
  const argsFile = spawner.scratchFile("bwrap-args");
  const extra: StdioSpec[] = ns ? [{ read: spec.userns!.nsPath }, ...ns.fds.map((read) => ({ read }))] : [];
  // The init comes as a descriptor the spawner opened on the host and is exec'd through it: no
  // path of the sandbox's root (the template's) is involved.
  if (asPid1.length) extra.push({ read: spec.init! });
  const command = asPid1.length ? [`/proc/self/fd/${ARGS_FD + extra.length}`] : [SLEEP, "infinity"];
  const argv = bwrapArgs ? [...(ns?.setpriv ?? []), "bwrap", "--args", String(ARGS_FD), "--", ...command] : [SLEEP, "infinity"];
  // The filter's descriptor comes after every other one bwrap is handed.
  const seccomp = spec.seccomp && bwrapArgs ? ["--seccomp", String(ARGS_FD + 1 + extra.length)] : [];
  if (seccomp.length) extra.push({ read: spec.seccomp! });
  // The info socket once more, for the init's start (waitInit): bwrap closes its info fd in both
  // of its processes at once, and its outer one every other descriptor it was given as it starts
  // to watch its child (bubblewrap.c monitor_child), but the child passes this one on through its
  // exec of the init, whose first step (close_range) closes it. So the socket ends once the init
  // runs (or the start died), and no process of the sandbox ever holds it. Not to bwrap's own
  // pid 1: its `sleep`, a template binary, would keep it.
  if (asPid1.length) extra.push({ same: INFO_FD });
  if (bwrapArgs) writeFileSync(argsFile, [...bwrapArgs, ...asPid1, ...seccomp, "--info-fd", String(INFO_FD), ""].join("\0"), { mode: 0o600 });
  let child: SpawnedProcess;
  try {
    child = await spawner.spawn(
      { file: "/bin/sh", args: ["-c", JOIN_SHIM, "sh", ...argv], cwd: spec.cwd, env },
      { detached: true, stdio: ["ignore", "ignore", { append: spec.log }, ...(bwrapArgs ? (["pipe", { read: argsFile }] as const) : []), ...extra] },
    );
  } finally {
    if (spec.bwrapArgs) rmSync(argsFile, { force: true });
  }
  const info = child.pipes.get(INFO_FD);
  let started = false;
  try {
    const exited = new Promise<never>((_, reject) => {
      child.onExit((e) => reject(new Error(`holder exited early (${e.error ?? e.signal ?? e.code}): ${lastLine(spec.log)}; see ${spec.log}`)));
    });
    exited.catch(() => {});
    const pid = child.pid;
    if (!spec.bwrapArgs) {
      const holder = procRef(pid);
      if (!holder) return await exited;
      await Promise.race([waitExec(pid, SLEEP), exited]);
      protectFromOOM([pid]);
      started = true;
      return { holder, nsInit: holder };
    }
    const bwrapInfo = readInfo(info!);
    const initPid = await Promise.race([bwrapInfo.childPid, exited]);
    const holder = procRef(pid);
    const nsInit = procRef(initPid);
    if (!holder || !nsInit) return await exited;
    // bwrap reports its pid 1 before the mounts are done; the init (or `sleep`) running means they are.
    try {
      const ready = asPid1.length ? waitInit(initPid, spec.init!, bwrapInfo.ended) : waitChildExec(initPid, SLEEP);
      await Promise.race([Promise.all([ready, spec.onNamespaces?.(nsInit)]), exited]);
    } catch (err) {
      // A holder the caller never learns of would outlive every retry (it is not tied to us).
      for (const ref of [nsInit, holder]) if (alive(ref)) process.kill(ref.pid, "SIGKILL");
      throw err;
    }
    // The holder only: bwrap's pid 1 and its `sleep` are inside the sandbox (see protectFromOOM).
    protectFromOOM([pid]);
    started = true;
    return { holder, nsInit };
  } finally {
    info?.destroy();
    // The spawner is the holder's parent: it hears of its exit (the end of a sandbox's pid 1)
    // as it happens, with no look at /proc. A start that failed ended it (or its caller does).
    child.forget(started ? spec.onEnd : undefined);
  }
}


/** The OOM killer never takes a holder the driver started (bwrap in the agent's pid namespace,
 * or `sleep` at `process` level, where it is the sandbox): a host binary no process of the
 * sandbox can name, let alone ptrace. (At bwrap levels the sandbox's pid 1 outlives it: killed,
 * the sandbox ran on.) Not the sandbox's pid 1 (nor an older holder's `sleep`, the template's
 * binary, which root inside may ptrace, as that pid 1): a fork made there would pass -1000 on to
 * tenant processes that the OOM killer then never takes, and at a level without a memory cgroup a
 * host OOM would kill host processes instead. (The init of sandbox-init.ts never forks and cannot
 * be ptraced; left a candidate all the same, unchanged.) They stay ordinary candidates, among the smallest of their sandbox: the
 * OOM killer takes the largest process first, though memory that counts to no process (tmpfs,
 * shm) can leave pid 1 (1-2 MB) next in line; a pid 1 that ends is restarted (local-driver.ts
 * #holderEnded, #checkWatched). Set after the fork of pid 1, which so inherits nothing. */
function protectFromOOM(pids: number[]): void {
  for (const pid of pids) {
    try {
      writeFileSync(`/proc/${pid}/oom_score_adj`, "-1000");
    } catch {
      // not root, or gone: the holder stays an ordinary candidate
    }
  }
}

/** bwrap's `--info-fd` socket: `childPid`, the sandbox's pid 1 as bwrap reports it (once the
 * whole object is read: closing the socket sooner SIGPIPEs bwrap), and `ended` once no process
 * holds the socket any more (its end of file; its error or close). Read as it comes, never closed
 * here: startHolder destroys it once the start is over. */
function readInfo(stream: Socket): { childPid: Promise<number>; ended: Promise<void> } {
  let text = "";
  let known = false;
  let gotPid!: (pid: number) => void;
  let noPid!: (err: Error) => void;
  let gone!: () => void;
  const childPid = new Promise<number>((ok, fail) => ((gotPid = ok), (noPid = fail)));
  const ended = new Promise<void>((ok) => (gone = ok));
  childPid.catch(() => {});
  stream.on("data", (chunk: Buffer) => {
    if (known) return;
    text += chunk.toString("latin1");
    try {
      const info = JSON.parse(text) as { "child-pid"?: number };
      if (typeof info["child-pid"] === "number") {
        known = true;
        gotPid(info["child-pid"]);
      }
    } catch {
      // incomplete so far
    }
  });
  const end = () => {
    if (!known) noPid(new Error("bwrap closed its info fd without a child pid"));
    gone();
  };
  stream.once("end", end).once("close", end).on("error", end);
  return { childPid, ended };
}

/** How long waitInit waits for the info socket's end before it looks every millisecond. */
const EVENT_FALLBACK_MS = 1000;

/** Until `pid` runs the init of `file` (runsFile) and has set SIGCHLD to SIG_IGN
 * (`SigIgn` in its status): the exe alone is so from the end of execve, before its close_range and
 * rt_sigaction, whose failure (an exit) would then read as a pid 1 that ended after a good start,
 * a restart loop, instead of a start that failed. Bounded as waitChildExec. Looked at first once
 * `closed` (the info socket's end: the init's close_range, or the start's death) or a second
 * without it, then every millisecond as before: the end is when the init runs, not
 * proof of it (a start that died ends it too, and where the spawner gave no second descriptor,
 * bwrap's own close ends it sooner), so the same look decides. Polled from the spawn, a start
 * looked 4 times (median; 2–16, over 3–19 ms: bwrap's mounts): one look now, or two when the init
 * is between its close_range and its rt_sigaction. */
async function waitInit(pid: number, file: string, closed: Promise<void>, timeoutMs = 20_000): Promise<void> {
  const want = statSync(file);
  const deadline = Date.now() + timeoutMs;
  let timer: NodeJS.Timeout | undefined;
  // Past a second without the end, look every millisecond as before: should anything ever keep
  // a copy of the socket open (a bwrap that passes it on), a start is slower, never 20 s late.
  await Promise.race([closed, new Promise<void>((ok) => (timer = setTimeout(ok, Math.min(timeoutMs, EVENT_FALLBACK_MS))))]);
  clearTimeout(timer);
  await pollFor(() => {
    try {
      return runsFile(pid, want) && ignoresSigchld(readFileSync(`/proc/${pid}/status`, "utf8"));
    } catch {
      return false; // not yet readable, or gone (the start's exit watch says so)
    }
  }, deadline - Date.now(), `sandbox init ${pid} did not start ${file}`);
}

/** Whether a `/proc/<pid>/status` text has SIGCHLD (17, bit 16) among the ignored signals. */
export function ignoresSigchld(status: string): boolean {
  const m = /^SigIgn:\s*([0-9a-f]+)$/m.exec(status);
  return m !== null && (BigInt(`0x${m[1]}`) & (1n << 16n)) !== 0n;
}

async function waitExec(pid: number, exe: string, timeoutMs = 5000): Promise<void> {
  await pollFor(() => exeOf(pid) === exe, timeoutMs, `process ${pid} did not exec ${exe}`);
}

/** Mounting a root under a loaded host's I/O (hundreds of starts at once) can take seconds. */
async function waitChildExec(pid: number, exe: string, timeoutMs = 20_000): Promise<void> {
  await pollFor(() => childrenOf(pid).some((c) => exeOf(c) === exe), timeoutMs, `sandbox init ${pid} did not start ${exe}`);
}

/** Looks every millisecond until `check` holds (an exec or a child's start has no event to wait
 * on: waitInit waits for one first), failing with `message` past `timeoutMs`. */
async function pollFor(check: () => boolean, timeoutMs: number, message: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(message);
    await sleep(1);
  }
}

function exeOf(pid: number): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/exe`);
  } catch {
    return undefined;
  }
}

function childrenOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").split(" ").filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

function allPids(): number[] {
  return readdirSync("/proc").filter((n) => /^\d+$/.test(n)).map(Number);
}

function nsInode(pid: number, ns: string): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/ns/${ns}`);
  } catch {
    return undefined;
  }
}

/** Processes of a sandbox found without a cgroup: every process in its pid namespace, plus every
 * process in the agent's own carrying the sandbox's marker in its environment (its holder and
 * `enter.pl`'s host side). The sandbox's namespace is its pid 1's (`nsInit`, while alive) and
 * that of each child of those marked processes (the holder's pid 1, `enter.pl`'s command): so a
 * record that lost `nsInit` (holder not adopted yet, record missing) still finds the namespace
 * while its holder lives. Only the driver starts processes in the agent's namespace at `bwrap`,
 * so a tenant can plant no such parent. A process in any other pid namespace is another
 * sandbox's, or nested in this one's, and is skipped before its environment is read: a tenant may
 * give its processes any sandbox's marker, and environments of megabytes.
 * `nested` (a freeze or thaw): a namespace nested in the sandbox's is taken too (`nestedIn`). A kill
 * needs no such walk: such a process dies with the sandbox's pid 1, which is in its namespace.
 * `everyNamespace`: at `process` level, where a sandbox has no pid namespace and its tenant's
 * processes are in the agent's like every other tenant's, each process's environment is read
 * whatever its namespace (the filter would cost a readlink per process and separate nothing). */
export function sandboxPids(id: string, nsInit?: ProcRef, scope: { everyNamespace?: boolean; nested?: boolean } = {}): number[] {
  const needle = `${MARKER_ENV}=${id}\0`;
  if (scope.everyNamespace) return allPids().filter((pid) => pid !== process.pid && environHas(pid, needle));
  const host = nsInode(process.pid, "pid");
  if (host === undefined) throw new Error("cannot read the agent's own pid namespace (/proc/self/ns/pid)");
  const own = new Set<string>();
  const initNs = nsInit && alive(nsInit) ? nsInode(nsInit.pid, "pid") : undefined;
  // A holder without namespaces (`process` level) shares the agent's: that one matches by marker only.
  if (initNs !== undefined && initNs !== host) own.add(initNs);
  const out: number[] = [];
  // Taken once every marked process's children have named the sandbox's namespace.
  const others: { pid: number; ns: string }[] = [];
  for (const pid of allPids()) {
    if (pid === process.pid) continue;
    // Undefined: exited, or not ours to inspect (its environment would not be either).
    const ns = nsInode(pid, "pid");
    if (ns === undefined) continue;
    if (ns !== host) {
      others.push({ pid, ns });
      continue;
    }
    if (!environHas(pid, needle)) continue;
    out.push(pid);
    for (const child of childrenOf(pid)) {
      const childNs = nsInode(child, "pid");
      if (childNs !== undefined && childNs !== host) own.add(childNs);
    }
  }
  const verdicts = new Map<string, boolean>();
  for (const { pid, ns } of others) {
    if (own.has(ns) || (scope.nested && own.size > 0 && nestedIn(pid, ns, own, host, verdicts))) out.push(pid);
  }
  return out;
}

/** The most parents one walk of `nestedIn` reads before it gives up (the namespace is then taken
 * as not nested: a freeze misses it). Verdicts are kept per scan, so the walks of one scan read
 * each process's parent at most once whatever this is: it bounds one walk, not the scan. */
const PARENT_WALK_CAP = 4096;

/** Whether `pid`'s pid namespace `ns` is nested in one of `own`: its parents, from the kernel's
 * `/proc/<pid>/stat`, are walked up until one is in `own` (nested), in the agent's namespace or
 * gone (not). Each process's parent is in its namespace or, for a namespace's pid 1, in the one
 * it was made from; an orphan is reparented inside its namespace, and a nested namespace's pid 1
 * whose parent died to the parent namespace's pid 1; so a walk from a namespace made inside the
 * sandbox's ends in it, and one from another sandbox's at that sandbox's outer bwrap, in the
 * agent's namespace (or at the host's init, had it died). Each step is checked against a pid
 * reused meanwhile: the child must still have that parent and its namespace afterwards (a dead
 * parent's children are reparented before its pid is free), else the walk ends with "not nested"
 * for this scan, as it does at a parent gone (the next pass of `signalSandbox`, which follows any
 * pass that signalled, walks again). `verdicts` (per scan) caches the answer for every namespace a
 * walk crossed, whatever ended it, so a tenant's churn cannot make one scan walk a namespace twice. */
function nestedIn(pid: number, ns: string, own: Set<string>, host: string, verdicts: Map<string, boolean>): boolean {
  const known = verdicts.get(ns);
  if (known !== undefined) return known;
  const crossed = [ns];
  let verdict = false;
  let child = pid;
  let childNs = ns;
  for (let step = 0; ; step++) {
    if (step === PARENT_WALK_CAP) break;
    const parent = parentOf(child);
    const parentNs = parent === undefined || parent <= 0 ? undefined : nsInode(parent, "pid");
    // Gone, or reused meanwhile: not nested, for this scan (the next pass walks again).
    if (parentNs === undefined || parentOf(child) !== parent || nsInode(child, "pid") !== childNs) break;
    if (own.has(parentNs)) verdict = true;
    if (parentNs === host || own.has(parentNs)) break;
    const cached = verdicts.get(parentNs);
    if (cached !== undefined) {
      verdict = cached;
      break;
    }
    if (parentNs !== childNs) crossed.push(parentNs);
    child = parent!;
    childNs = parentNs;
  }
  for (const n of crossed) verdicts.set(n, verdict);
  return verdict;
}

/** Whether the process is gone, a zombie, or exiting (the kernel's `/proc/<pid>/stat`): it runs
 * nothing more, though a pid 1 waiting in its namespace's teardown still shows state S. */
export function exiting(pid: number): boolean {
  const fields = statFields(pid);
  return fields === undefined || fieldsEnded(fields);
}

/** A process's parent pid from the kernel's `/proc/<pid>/stat` (field 4), or undefined. */
function parentOf(pid: number): number | undefined {
  const fields = statFields(pid);
  return fields === undefined ? undefined : Number(fields[1]);
}

/** The variable that carries a holder's nonce (records.ts: holderNonce). Commands get their own
 * environment (local-view.ts), not the holder's. The sandbox's pid 1 keeps it, unreadable from
 * inside (sandbox-init.ts: not dumpable); an older holder's pid 1, a copy of bwrap, and its `sleep
 * infinity` show it, so that sandbox's own tenant may read its nonce there: it lets that tenant
 * pose only as its own holder, which it could do anyway. */
export const HOLDER_NONCE_ENV = "KRUISE_HOLDER_NONCE";

/** The holder (and its pid 1) of a sandbox whose record lost them: an agent killed between
 * spawning the holder and writing the record. `candidates` are the sandbox's processes when its
 * cgroup lists them (cheap); otherwise every process in the agent's pid namespace, where every
 * holder runs (`sandboxPids`), so at `bwrap` no tenant's process (each is in its sandbox's
 * namespace) is a candidate. At `process` level a tenant's processes are in the agent's namespace
 * and may carry another sandbox's marker and the holder's command line, so a process is taken
 * only with the record's `nonce` too; a record without one (an older agent's, whose holder has
 * none) is matched by id and command line alone, until its holder is next started. */
export function discoverHolder(id: string, nonce: string | undefined, candidates?: number[]): StartedHolder | undefined {
  const marker = `${MARKER_ENV}=${id}\0`;
  const ours = (pid: number) => nonce === undefined || environHas(pid, `${HOLDER_NONCE_ENV}=${nonce}\0`);
  const host = nsInode(process.pid, "pid");
  // Without a cgroup: the agent's namespace only (the sandbox's own holds its tenant's processes).
  for (const pid of candidates ?? sandboxPids(id).filter((p) => nsInode(p, "pid") === host)) {
    const cmd = readProcPrefix(pid, "cmdline");
    if (cmd === undefined) continue;
    const holder = procRef(pid);
    if (!holder) continue;
    // The outer bwrap; its pid 1 inside has the same command line, but bwrap as its parent.
    if (cmd.startsWith("bwrap\0") && readParentCmd(pid) !== "bwrap" && environHas(pid, marker) && ours(pid)) {
      // A child that has ended (a pid 1 killed a moment ago, not yet reaped by the outer bwrap)
      // is no running sandbox: the pass that looks again restarts it.
      const init = childrenOf(pid).map(procRef).find((r) => r !== undefined && alive(r));
      if (init) return { holder, nsInit: init };
    }
    if (cmd === `${SLEEP}\0infinity\0` && readParentCmd(pid) !== "bwrap" && ours(pid)) return { holder, nsInit: holder };
  }
  return undefined;
}

/** One buffer for every environment a scan reads: a /proc file has no size to go by, so a buffer
 * per read would be 64 KiB per process, and a scan reads one per process on the host, twice per
 * destroy at a level without cgroups (issue 16). A larger environment (a tenant
 * chooses its size) gets a buffer of its own, not kept. */
const ENVIRON_BUF = Buffer.allocUnsafe(64 * 1024);

/** The most of one environment a scan reads. exec caps argv + environment at 6 MiB, so one larger
 * than this was rewritten by its process after exec (prctl PR_SET_MM_MAP needs no capability and
 * can point it at any mapping, 1 GiB costs the tenant nothing): read whole, it would block the
 * agent's event loop and grow its memory at the tenant's choice. Such a process is taken as not
 * carrying the marker, which is safe: a process that can rewrite its environment could as well
 * have dropped the marker ("a process that clears its environment escapes", drivers/README.md),
 * and a holder the agent started has the environment it was given. */
export const ENVIRON_CAP = 8 * 1024 * 1024;

/** Whether the process's environment holds the variable `entry` (`NAME=value\0`) at a variable's
 * start: first, or after a NUL (`X_NAME=value` is another variable). False for a process that
 * exited, is not ours to read, or whose environment is over `cap` bytes. */
export function environHas(pid: number, entry: string, cap = ENVIRON_CAP): boolean {
  const env = readProc(pid, "environ", cap, ENVIRON_BUF);
  if (env === undefined || env.length > cap) return false;
  return env.toString("latin1", 0, entry.length) === entry || env.includes(`\0${entry}`, 0, "latin1");
}

/** The first `max` bytes of a /proc file of `pid` (latin1), or undefined. A command line is the
 * tenant's too (as long as the memory it points at): a match needs only its start. */
function readProcPrefix(pid: number, file: string, max = 4096): string | undefined {
  return readProc(pid, file, max - 1)?.toString("latin1");
}

/** A /proc file of `pid` read to its end (a read may stop short of it) or to one byte past `max`
 * (a longer one is told from one of exactly `max`); into `into` while it fits, then a buffer of
 * its own. Undefined for a process that exited or is not ours to read. */
function readProc(pid: number, file: string, max: number, into = Buffer.allocUnsafe(Math.min(max + 1, 64 * 1024))): Buffer | undefined {
  let fd: number;
  try {
    fd = openSync(`/proc/${pid}/${file}`, "r");
  } catch {
    return undefined;
  }
  try {
    let buf = into;
    let n = 0;
    for (;;) {
      if (n === buf.length) {
        if (n > max) break;
        const bigger = Buffer.allocUnsafe(Math.min(2 * n, max + 1));
        buf.copy(bigger, 0, 0, n);
        buf = bigger;
      }
      const got = readSync(fd, buf, n, buf.length - n, null);
      if (got === 0) break;
      n += got;
    }
    return buf.subarray(0, n);
  } catch {
    return undefined;
  } finally {
    closeSync(fd);
  }
}

function readParentCmd(pid: number): string | undefined {
  const ppid = parentOf(pid);
  return ppid === undefined ? undefined : readProcPrefix(ppid, "cmdline")?.split("\0")[0];
}

/** Sends `signal` to every process of the sandbox (`sandboxPids`) until a pass finds none new
 * (processes may fork while being signalled). Returns how many processes were signalled. */
export async function signalSandbox(id: string, nsInit: ProcRef | undefined, signal: NodeJS.Signals, everyNamespace = false): Promise<number> {
  const seen = new Set<number>();
  const scope = { everyNamespace, nested: signal !== "SIGKILL" };
  for (let pass = 0; pass < 50; pass++) {
    const found = sandboxPids(id, nsInit, scope);
    // One SIGKILLed already and now exiting (a zombie whose parent has not reaped it, as under an
    // init that reaps lazily; a pid 1 waiting in its namespace's teardown for such a zombie) runs
    // nothing more and is not ended sooner by another signal, so a kill is done without it. Only
    // once signalled: a process whose main thread exited looks a zombie while its others run.
    const fresh = found.filter((p) => !seen.has(p) || (signal === "SIGKILL" && !exiting(p)));
    if (fresh.length === 0) return seen.size;
    for (const pid of fresh) {
      seen.add(pid);
      try {
        process.kill(pid, signal);
      } catch {
        // gone already
      }
    }
    await sleep(signal === "SIGKILL" ? 5 : 1);
  }
  throw new Error(`sandbox ${id}: processes keep appearing while sending ${signal}`);
}
