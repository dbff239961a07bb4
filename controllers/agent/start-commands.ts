// A built template's start and ready commands (E2B `setStartCmd`/`setReadyCmd`): every sandbox of
// the template starts the start command once it runs (as the template's user, in its workdir, with
// the sandbox's env), and is reported ready only once the ready command exits 0. The ready command
// is polled (E2B's helpers make it a test: `ss … sport = :8000`, `curl … | grep -q 200`, `[ -f … ]`,
// `pgrep …`, `sleep N`); past the timeout the sandbox fails with a reason that says so. The start
// command's output is the sandbox's log (E2B's logs API). Both run through the runtime's own
// process launcher, inside the sandbox, so they are as contained as any process a client starts.
import { lstatPinned } from "../runtime/pinned-path.ts";
import { ProcessHandle } from "../runtime/process/process-handle.ts";
import type { RuntimeSandbox } from "../runtime/sandbox.ts";
import type { SandboxLogs } from "./sandbox-logs.ts";
import { logger } from "../lib/log.ts";
import { LineCutter } from "../lib/line-cutter.ts";

const LOG = logger("start-command");
const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/** Pause between two runs of the ready command. */
export const READY_POLL_MS = 300;
/** The longest line of start-command output kept as one log entry before it is cut. */
const MAX_LINE = 8192;

export interface StartSpec {
  startCmd?: string;
  readyCmd?: string;
  user: string;
  workdir: string;
}

export type StartStatus = { state: "none" | "starting" | "ready" } | { state: "failed"; message: string };

interface Entry {
  status: StartStatus;
  start?: ProcessHandle;
  probe?: ProcessHandle;
  stopped: boolean;
}

export interface StartCommandsDeps {
  logs: SandboxLogs;
  /** The sandbox's readiness changed: reconcile it again. */
  changed(id: string): void;
}

export class StartCommands {
  readonly #d: StartCommandsDeps;
  readonly #entries = new Map<string, Entry>();

  constructor(deps: StartCommandsDeps) {
    this.#d = deps;
  }

  /**
   * Where the sandbox's start is; the first call for a running sandbox starts it. `adopted`: the
   * sandbox ran before this agent did, so its start command already runs inside it and only the
   * ready command is checked again.
   */
  status(id: string, sbx: RuntimeSandbox, spec: StartSpec, timeoutMs: number, adopted: boolean): StartStatus {
    if (!spec.startCmd && !spec.readyCmd) return { state: "none" };
    let e = this.#entries.get(id);
    if (!e) {
      e = { status: { state: "starting" }, stopped: false };
      this.#entries.set(id, e);
      void this.#run(id, e, sbx, spec, timeoutMs, adopted).catch((err) => {
        e!.status = { state: "failed", message: `the start command could not run: ${(err as Error)?.message ?? err}` };
        this.#d.changed(id);
      });
    }
    return e.status;
  }

  /** The sandbox stopped or went away: its start command ended with it; a later start runs it again. */
  forget(id: string): void {
    const e = this.#entries.get(id);
    if (!e) return;
    e.stopped = true;
    e.probe?.signalGroup("SIGKILL");
    this.#entries.delete(id);
  }

  async #run(id: string, e: Entry, sbx: RuntimeSandbox, spec: StartSpec, timeoutMs: number, adopted: boolean): Promise<void> {
    const user = sbx.resolveUser(spec.user);
    const cwd = workdirIsDir(sbx, spec.workdir) ? spec.workdir : user.home;
    const env = { PATH: DEFAULT_PATH, HOME: user.home, USER: user.name, LOGNAME: user.name, ...sbx.envVars };
    const spawn = (script: string, tag: string) => {
      const host = sbx.view.command({ cmd: "/bin/bash", args: ["-l", "-c", script], cwd, env, user });
      return ProcessHandle.spawnPipes(host, { cmd: "/bin/bash", args: ["-l", "-c", script], envs: {}, cwd }, tag, false, sbx.view.launcher);
    };
    let startEnd: string | undefined;
    if (spec.startCmd && !adopted) {
      const h = await spawn(spec.startCmd, "start-cmd");
      e.start = h;
      // Listed like any process, so a client can see (and stop) it.
      sbx.processes.add(h);
      this.#pipeToLogs(id, h);
      void h.exited().then(() => (startEnd = `the start command exited with code ${h.end?.exitCode ?? "?"}${h.end?.error ? ` (${h.end.error})` : ""}`));
      LOG.info("start command started", { sandboxId: id, pid: h.pid });
    }
    if (!spec.readyCmd) return this.#set(id, e, { state: "ready" });
    const deadline = Date.now() + timeoutMs;
    while (!e.stopped) {
      const left = deadline - Date.now();
      if (left <= 0) break;
      const probe = await spawn(spec.readyCmd, "ready-cmd");
      e.probe = probe;
      const timer = setTimeout(() => probe.signalGroup("SIGKILL"), left);
      await probe.exited();
      clearTimeout(timer);
      if (e.stopped) return;
      if (probe.end?.exitCode === 0) {
        this.#d.logs.append(id, "info", "ready command passed", { source: "ready" });
        return this.#set(id, e, { state: "ready" });
      }
      await new Promise((r) => setTimeout(r, Math.min(READY_POLL_MS, Math.max(0, deadline - Date.now()))));
    }
    if (e.stopped) return;
    const message = `the template's ready command did not pass within ${Math.round(timeoutMs / 1000)} s${startEnd ? `; ${startEnd}` : ""}; the start command's output is in the sandbox's logs`;
    this.#d.logs.append(id, "error", message, { source: "ready" });
    e.start?.signalGroup("SIGKILL");
    this.#set(id, e, { state: "failed", message });
  }

  #set(id: string, e: Entry, status: StartStatus): void {
    if (e.stopped) return;
    e.status = status;
    this.#d.changed(id);
  }

  /** Each line of the start command's stdout and stderr becomes a log entry of the sandbox. */
  #pipeToLogs(id: string, h: ProcessHandle): void {
    const decoder = { stdout: new TextDecoder(), stderr: new TextDecoder() };
    const emit = (stream: "stdout" | "stderr") => (line: string) => this.#d.logs.append(id, stream === "stderr" ? "warn" : "info", line, { source: "start", stream });
    const lines = { stdout: new LineCutter(emit("stdout"), MAX_LINE), stderr: new LineCutter(emit("stderr"), MAX_LINE) };
    h.subscribe((ev) => {
      if (ev.type === "end") {
        lines.stdout.end();
        lines.stderr.end();
        this.#d.logs.append(id, ev.end.exitCode === 0 ? "info" : "warn", `start command exited with code ${ev.end.exitCode}`, { source: "start" });
        return;
      }
      if (ev.stream === "pty") return;
      lines[ev.stream].push(decoder[ev.stream].decode(ev.data, { stream: true }));
    });
  }
}

/** Whether the template's workdir is a directory, looked at through the pinned path as a
 * command's cwd is (process/start.ts): a stat of toHost's string would be walked again from the
 * host's `/`, and a directory the tenant swapped for a link meanwhile would have the start
 * command's cwd (which it can print) tell whether a host directory exists. A path error (missing,
 * changed under the walk) is "no"; the sandbox gone or the path leaving it still throws. */
function workdirIsDir(sbx: RuntimeSandbox, workdir: string): boolean {
  try {
    return lstatPinned(sbx.view, workdir)?.isDirectory() ?? false;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code) return false;
    throw err;
  }
}
