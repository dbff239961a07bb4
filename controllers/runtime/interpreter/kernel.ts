// One code-interpreter context: a kernel driver running inside the sandbox as the context's user, in
// the context's cwd, speaking E2B's /execute lines over a pipe: Python's (kernel-driver-source.ts)
// starts a Jupyter kernel and relays its messages; JavaScript's (js-driver-source.ts) is the kernel
// itself, run by the sandbox's node. Executions queue in the driver, one at a time per context.
import { createInterface } from "node:readline";
import type { LaunchedPipes } from "../process/launcher.ts";
import { inProcessLauncher } from "../process/launcher.ts";
import type { RuntimeSandbox } from "../sandbox.ts";
import type { SandboxUser } from "../sandbox-view.ts";
import { KERNEL_DRIVER_PY } from "./kernel-driver-source.ts";
import { JS_DRIVER_SOURCE } from "./js-driver-source.ts";
import { BASH_DRIVER_SOURCE } from "./bash-driver-source.ts";
import { parseDriverLine, type OutputLine } from "../../../schema/interpreter/http.ts";


/** A driver line is one output (a PNG is the largest); longer ones are cut off and reported. */
const MAX_LINE = 64 << 20;
/** The driver's stderr kept to explain a failed start (the rest is dropped). */
const STDERR_TAIL = 40;
const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

export class KernelStartError extends Error {}

/** How a language's driver runs and is steered. */
export interface KernelSpec {
  language: string;
  /** The driver's command inside the sandbox (the driver's source travels as an argument). */
  argv: readonly string[];
  env?: Record<string, string>;
  /** `signal`: the running cell is interrupted with SIGINT (a busy node loop reads no stdin), and a
   * restart is a fresh driver; `line`: both are lines to the driver. */
  control: "line" | "signal";
  /** What the sandbox must have for it (named when the driver does not start). */
  requires: string;
}

export const KERNEL_SPECS = {
  python: { language: "python", argv: ["/usr/bin/python3", "-c", KERNEL_DRIVER_PY, "python3"], env: { PYTHONUNBUFFERED: "1" }, control: "line", requires: "/usr/bin/python3 with Jupyter (ipykernel, jupyter_client)" },
  js: { language: "javascript", argv: ["/usr/bin/node", "-e", JS_DRIVER_SOURCE], control: "signal", requires: "/usr/bin/node" },
  // TypeScript is the JavaScript driver transpiling each cell inside the sandbox (js-driver-source.ts).
  ts: { language: "typescript", argv: ["/usr/bin/node", "-e", JS_DRIVER_SOURCE, "typescript"], control: "signal", requires: "/usr/bin/node" },
  // bash's driver is a node script too (it keeps a bash and frames its cells' output).
  bash: { language: "bash", argv: ["/usr/bin/node", "-e", BASH_DRIVER_SOURCE], control: "signal", requires: "/usr/bin/node and /bin/bash" },
  // R is IRkernel (Jupyter's kernel spec `ir`) run by the same Python driver.
  r: { language: "r", argv: ["/usr/bin/python3", "-c", KERNEL_DRIVER_PY, "ir"], env: { PYTHONUNBUFFERED: "1" }, control: "line", requires: "R with IRkernel (Debian's r-base-core, r-cran-irkernel) and Jupyter's Python client" },
} as const satisfies Record<string, KernelSpec>;

interface Job {
  onLine(line: OutputLine): void;
  done(): void;
}

export class Kernel {
  readonly id: string;
  readonly language: string;
  readonly cwd: string;
  readonly spec: KernelSpec;
  #where: { sbx: RuntimeSandbox; user: SandboxUser } | undefined;
  #proc: LaunchedPipes | undefined;
  #ready: Promise<void>;
  #jobs = new Map<number, Job>();
  #next = 0;
  #stderr: string[] = [];
  #exited = false;
  /** The sandbox env the driver started with (a kernel started before a claim lacks its env). */
  #startEnv: Record<string, string> = {};
  #starting: Promise<void> | undefined;

  constructor(id: string, spec: KernelSpec, cwd: string) {
    this.id = id;
    this.spec = spec;
    this.language = spec.language;
    this.cwd = cwd;
    this.#ready = Promise.resolve();
  }

  /** Whether a driver is up (a context carried over a Stop pause has none until its next cell). */
  get running(): boolean {
    return this.#proc !== undefined && !this.#exited;
  }

  /** Starts the driver unless it runs: a context whose kernel ended (a Stop pause ended every
   * process of the sandbox; a crash) comes back fresh, with its id, language and cwd. */
  ensure(sbx: RuntimeSandbox, user: SandboxUser): Promise<void> {
    if (this.running) return this.#ready;
    this.#starting ??= this.start(sbx, user).finally(() => (this.#starting = undefined));
    return this.#starting;
  }

  /** Starts the driver and waits until its kernel answers. */
  start(sbx: RuntimeSandbox, user: SandboxUser): Promise<void> {
    this.#where = { sbx, user };
    this.#exited = false;
    this.#ready = this.#start(sbx, user);
    return this.#ready;
  }

  async #start(sbx: RuntimeSandbox, user: SandboxUser): Promise<void> {
    this.#startEnv = { ...sbx.envVars };
    const env = { PATH: DEFAULT_PATH, HOME: user.home, USER: user.name, LOGNAME: user.name, ...this.spec.env, ...sbx.envVars };
    const [cmd, ...args] = this.spec.argv;
    const host = sbx.view.command({ cmd: cmd!, args, cwd: this.cwd, env, user });
    const proc = await (sbx.view.launcher ?? inProcessLauncher).spawnPipes(host, true);
    this.#proc = proc;
    proc.stdin?.on("error", () => {});
    createInterface({ input: proc.stderr, crlfDelay: Infinity }).on("line", (line) => {
      this.#stderr.push(line.slice(0, 1000));
      if (this.#stderr.length > STDERR_TAIL) this.#stderr.shift();
    });
    let ready!: () => void;
    let failed!: (err: Error) => void;
    const started = new Promise<void>((resolve, reject) => ((ready = resolve), (failed = reject)));
    // The start of a line not yet ended, as it came. Only each new chunk is searched for its end:
    // a long line (a cell's output, up to MAX_LINE) comes in many 64 KB chunks, and searching (so
    // flattening) all that was held at every chunk cost the agent's loop ~40 s for a 60 MB line.
    let pending: string[] = [];
    let held = 0;
    proc.stdout.setEncoding("utf8");
    proc.stdout.on("data", (chunk: string) => {
      if (proc !== this.#proc) return;
      let from = 0;
      let nl: number;
      while ((nl = chunk.indexOf("\n", from)) >= 0) {
        const tail = chunk.slice(from, nl);
        const line = held ? pending.join("") + tail : tail;
        pending = [];
        held = 0;
        this.#onLine(line, ready);
        from = nl + 1;
      }
      if (from < chunk.length) {
        pending.push(chunk.slice(from));
        held += chunk.length - from;
      }
      if (held > MAX_LINE) {
        pending = [];
        held = 0;
        this.#fail(`the kernel driver sent a line over ${MAX_LINE} bytes`);
      }
    });
    proc.onExit((e) => {
      if (proc !== this.#proc) return; // a driver replaced by a restart
      this.#exited = true;
      const why = `the ${this.language} kernel's driver exited (${e.signal ?? `code ${e.code}`})${this.#stderr.length ? `:\n${this.#stderr.join("\n")}` : ""}`;
      failed(new KernelStartError(why));
      // A cell's code may end its kernel (`os._exit`, `process.exit`): the next cell starts a new
      // one (ensure). The cells it cut get E2B's words for that (its server's ContextRestarting on
      // a kernel restarted under a cell), the exit's reason in the traceback.
      this.#fail(why, { name: "ContextRestarting", value: "Context was restarted" });
    });
    await started;
  }

  #onLine(text: string, ready: () => void): void {
    const msg = parseDriverLine(text);
    if (!msg) return;
    if ("ready" in msg) return ready();
    const job = this.#jobs.get(msg.id);
    if (!job) return;
    if ("done" in msg) {
      this.#jobs.delete(msg.id);
      job.done();
    } else job.onLine(msg.line);
  }

  /** Ends every waiting execution with an error line (the driver is gone): `why` is the value,
   * or the traceback under `as`'s name and value. */
  #fail(why: string, as?: { name: string; value: string }): void {
    for (const [id, job] of this.#jobs) {
      this.#jobs.delete(id);
      job.onLine(as ? { type: "error", ...as, traceback: why } : { type: "error", name: "KernelDriverError", value: why, traceback: "" });
      job.done();
    }
  }

  #send(msg: unknown): void {
    if (this.#exited) throw new KernelStartError(`the ${this.language} kernel is not running`);
    this.#proc?.stdin?.write(`${JSON.stringify(msg)}\n`);
  }

  /** Queues a cell; `onLine` gets its output lines. `cancel` interrupts it (or drops it while it
   * still waits its turn); the returned promise settles when the kernel is done with it. */
  execute(code: string, env: Record<string, string> | undefined, onLine: (line: OutputLine) => void): { done: Promise<void>; cancel(): void } {
    const id = ++this.#next;
    const done = new Promise<void>((resolve) => this.#jobs.set(id, { onLine, done: resolve }));
    // The sandbox's env as it is now, where the kernel started with another (a warm kernel, then a
    // claim's env): Python's driver sets it for good, once; the others get it with every cell.
    const changed = Object.fromEntries(Object.entries(this.#where?.sbx.envVars ?? {}).filter(([k, v]) => this.#startEnv[k] !== v));
    const sandboxEnv = Object.keys(changed).length ? changed : undefined;
    if (sandboxEnv && this.spec.control === "line") {
      this.#send({ op: "execute", id, code, env: env ?? {}, global_env: sandboxEnv });
      this.#startEnv = { ...this.#startEnv, ...sandboxEnv };
    } else this.#send({ op: "execute", id, code, env: { ...sandboxEnv, ...env } });
    return { done, cancel: () => this.#cancel(id) };
  }

  #cancel(id: number): void {
    if (!this.#jobs.has(id)) return;
    // The oldest job is the one running (the driver runs them in order).
    if (this.spec.control === "signal" && this.#jobs.keys().next().value === id) {
      try {
        if (this.#proc) process.kill(this.#proc.pid, "SIGINT");
      } catch {
        // gone already: its exit ends the job
      }
    } else this.#send({ op: "cancel", id });
  }

  /** A fresh kernel: every variable is gone, the context (id, cwd) stays. */
  async restart(): Promise<void> {
    await this.#ready;
    if (this.spec.control === "signal" && this.#where) {
      const old = this.#proc;
      this.#proc = undefined;
      this.#end(old);
      this.#fail(`the ${this.language} context was restarted`);
      return this.start(this.#where.sbx, this.#where.user);
    }
    const id = ++this.#next;
    const done = new Promise<void>((resolve) => this.#jobs.set(id, { onLine: () => {}, done: resolve }));
    this.#send({ op: "restart", id });
    await done;
  }

  /** Closing stdin makes the driver shut its kernel down and exit. */
  close(): void {
    this.#end(this.#proc);
  }

  #end(proc: LaunchedPipes | undefined): void {
    // A node driver busy in a cell reads no stdin: interrupt the cell first, so it sees the close.
    if (proc && this.spec.control === "signal") {
      try {
        process.kill(proc.pid, "SIGINT");
      } catch {
        // already gone
      }
    }
    proc?.stdin?.end();
  }
}
