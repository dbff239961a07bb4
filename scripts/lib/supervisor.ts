// Keeps one component of the local system (sqld, workerd, the agent) running: when it exits
// without being asked to, the supervisor says so with the reason (exit code or signal) and starts
// it again after a backoff (0.5 s doubling to 10 s; back to 0.5 s once a run lasted 30 s). A start
// that fails is retried the same way. Only stop() ends that: it is how the launcher (Ctrl-C) and
// tests stop a component on purpose.

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** One running instance of a component. */
export interface Running {
  pid: number;
  exited: Promise<Exit>;
  /** Asks it to stop (SIGTERM unless told otherwise) and resolves once it exited. */
  stop(signal?: NodeJS.Signals): Promise<void>;
}

const FIRST_BACKOFF_MS = 500;
const MAX_BACKOFF_MS = 10_000;
const STABLE_MS = 30_000;

export function describeExit(e: Exit): string {
  return e.signal ? `killed by ${e.signal}` : `exit code ${e.code}`;
}

export class Supervisor<T extends Running> {
  readonly name: string;
  private readonly launch: () => Promise<T>;
  private readonly log: (line: string) => void;
  private running: T | null = null;
  private wanted = false;
  private backoffMs = FIRST_BACKOFF_MS;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private starting: Promise<void> | null = null;
  /** Restarts after an unasked exit, since the supervisor was made. */
  restarts = 0;

  constructor(name: string, launch: () => Promise<T>, log: (line: string) => void) {
    this.name = name;
    this.launch = launch;
    this.log = log;
  }

  /** The current instance (null while it is down). */
  get current(): T | null {
    return this.running;
  }

  /** Starts the component and keeps it running; rejects if this first start fails. */
  async start(): Promise<void> {
    this.wanted = true;
    this.backoffMs = FIRST_BACKOFF_MS;
    await this.startOnce();
  }

  /** Stops it on purpose: no restart until start() is called again. */
  async stop(signal?: NodeJS.Signals): Promise<void> {
    this.wanted = false;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.starting?.catch(() => undefined);
    await this.running?.stop(signal);
    this.running = null;
  }

  private startOnce(): Promise<void> {
    const attempt = this.launch().then((r) => {
      const since = Date.now();
      this.running = r;
      void r.exited.then((exit) => this.exited(r, exit, Date.now() - since));
    });
    this.starting = attempt;
    void attempt.catch(() => undefined).then(() => {
      if (this.starting === attempt) this.starting = null;
    });
    return attempt;
  }

  private exited(r: T, exit: Exit, ranMs: number): void {
    if (this.running === r) this.running = null;
    if (!this.wanted) return;
    if (ranMs >= STABLE_MS) this.backoffMs = FIRST_BACKOFF_MS;
    this.log(`${this.name} exited (${describeExit(exit)}); restarting in ${this.backoffMs / 1000} s`);
    this.scheduleRestart();
  }

  private scheduleRestart(): void {
    const wait = this.backoffMs;
    this.backoffMs = Math.min(this.backoffMs * 2, MAX_BACKOFF_MS);
    this.timer = setTimeout(() => {
      this.timer = null;
      if (!this.wanted) return;
      this.startOnce().then(
        () => {
          this.restarts++;
          this.log(`${this.name} is running again (pid ${this.running?.pid})`);
        },
        (err: unknown) => {
          if (!this.wanted) return;
          this.log(`${this.name} did not start: ${(err as Error).message}; next try in ${this.backoffMs / 1000} s`);
          this.scheduleRestart();
        },
      );
    }, wait);
  }
}
