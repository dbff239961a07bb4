// Per-sandbox state: what /init configured (token, env, default user and workdir), the processes
// and polling watchers the sandbox owns, and the view every path and spawn goes through.
import type { IncomingMessage } from "node:http";
import { posix } from "node:path";
import type { DirWatcher } from "./filesystem/dir-watcher.ts";
import { MetadataStore } from "./metadata-store.ts";
import { ProcessTable } from "./process/process-table.ts";
import type { SandboxUser, SandboxView } from "./sandbox-view.ts";

export interface SandboxOptions {
  /** Once set, every request but /health and signed /files must carry it as X-Access-Token. */
  accessToken?: string;
  /** Sandbox-global environment for every process (NewSandbox.envVars). */
  envVars?: Record<string, string>;
  /** Used when a request names no user; envd's built-in default is root. */
  defaultUser?: string;
  /** cwd for processes that ask for none; defaults to the user's home. */
  defaultWorkdir?: string;
  /** Its template has the code interpreter: the runtime serves its port 49999. */
  interpreter?: boolean;
}

/** The body of POST /init (envd.yaml); `timestamp` orders competing inits. */
export interface InitRequest extends SandboxOptions {
  timestamp?: string;
}

export class UnknownUserError extends Error {
  constructor(name: string) {
    super(`invalid username: '${name}': user: unknown user ${name}`);
    this.name = "UnknownUserError";
  }
}

// node:crypto is loaded at first use, not at start-up (~6 ms of CPU before /health answers).
const crypto = () => process.getBuiltinModule("node:crypto");

function digest(token: string): Buffer {
  // The one-shot hash: no Hash object per call (each create and each request checks a token).
  return crypto().hash("sha256", token, "buffer");
}

export class RuntimeSandbox {
  readonly id: string;
  readonly view: SandboxView;
  readonly processes = new ProcessTable();
  readonly watchers = new Map<string, DirWatcher>();
  readonly metadata: MetadataStore;
  /** Requests in flight, so removing the sandbox can cut its open streams at the TCP level. */
  readonly requests = new Set<IncomingMessage>();
  /** Run when the sandbox is removed (parts loaded on demand, like the code interpreter). */
  readonly onClose = new Set<() => void>();
  /** What parts loaded on demand keep across a Stop pause (the code interpreter's contexts): the
   * runtime hands it to the sandbox registered next under this id (Runtime.removeSandbox). Plain
   * JSON values; `saveCarried()` after a change keeps it over an agent restart too. */
  readonly carried = new Map<string, unknown>();
  /** Set by the runtime: where `carried` is kept (Runtime's `parkedDir`). */
  onCarried: ((carried: Map<string, unknown>) => void) | undefined;
  envVars: Record<string, string> = {};
  defaultUser = "root";
  defaultWorkdir: string | undefined;
  /** Whether port 49999 is the code interpreter (SandboxOptions.interpreter). */
  interpreter = false;
  accessToken: string | undefined;
  #tokenDigest: Buffer | undefined;
  #initAt = -Infinity;

  /** `alone`: the runtime serves only this sandbox (standalone, a pod's sidecar), so a call that
   * blocks its event loop blocks no other sandbox (MetadataStore's `syncReads`). */
  constructor(id: string, view: SandboxView, opts: SandboxOptions = {}, mode: { alone?: boolean } = {}) {
    this.id = id;
    this.view = view;
    this.metadata = new MetadataStore({ syncReads: mode.alone });
    this.configure(opts);
  }

  configure(opts: SandboxOptions): void {
    if (opts.envVars) this.envVars = { ...this.envVars, ...opts.envVars };
    if (opts.defaultUser) this.defaultUser = opts.defaultUser;
    if (opts.defaultWorkdir) this.defaultWorkdir = opts.defaultWorkdir;
    if (opts.interpreter !== undefined) this.interpreter = opts.interpreter;
    if (opts.accessToken !== undefined) {
      this.accessToken = opts.accessToken || undefined;
      this.#tokenDigest = opts.accessToken ? digest(opts.accessToken) : undefined;
    }
  }

  /** Applies /init unless a newer one already did: the orchestrator may retry an old request
   * after a newer one (resume), and the older one must not win. Returns whether it applied. */
  init(req: InitRequest): boolean {
    const at = req.timestamp ? Date.parse(req.timestamp) : NaN;
    if (!Number.isNaN(at)) {
      if (at <= this.#initAt) return false;
      this.#initAt = at;
    }
    this.configure(req);
    return true;
  }

  /** Constant time in the token's length and content (both sides are hashed first). */
  checkToken(presented: string | undefined | null): boolean {
    if (!this.#tokenDigest) return true;
    if (!presented) return false;
    return crypto().timingSafeEqual(digest(presented), this.#tokenDigest);
  }

  resolveUser(name: string | undefined): SandboxUser {
    const user = this.view.lookupUser(name || this.defaultUser);
    if (!user) throw new UnknownUserError(name || this.defaultUser);
    return user;
  }

  /** envd's ExpandAndResolve: `~` expands to the user's home, relative paths resolve under it. */
  resolvePath(path: string, user: SandboxUser): string {
    let p = path;
    if (p === "~") p = user.home;
    else if (p.startsWith("~/")) p = user.home + p.slice(1);
    return posix.resolve(user.home, p);
  }

  /** `carried` changed: keep it now, not only when the sandbox is Stop-paused (an agent killed
   * before it saw the pause must not lose it). */
  saveCarried(): void {
    this.onCarried?.(this.carried);
  }

  close(): void {
    for (const req of this.requests) req.socket.destroy();
    this.requests.clear();
    this.processes.killAll();
    for (const w of this.watchers.values()) w.close();
    this.watchers.clear();
    for (const fn of this.onClose) fn();
    this.onClose.clear();
  }
}
