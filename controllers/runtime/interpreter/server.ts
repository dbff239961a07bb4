// The code interpreter's HTTP API (port 49999 of a sandbox, E2B's Jupyter server's surface), served
// by the agent-runtime for each sandbox it serves. Contexts are kernels inside the sandbox, each run
// by a kernel driver (kernel.ts); the default context of a language starts with its first cell.
// Loaded on the first request to the port, so sandboxes that never run code cost nothing here.
import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { outputLineText, parseCreateContextRequest, parseExecuteRequest, type OutputLine } from "../../../schema/interpreter/http.ts";
import { readJson } from "../http/read-json.ts";
import { lstatPinned } from "../pinned-path.ts";
import { PathOutsideSandboxError } from "../sandbox-view.ts";
import { HttpError, presentedToken, sendJson, UNAUTHORIZED } from "../http/respond.ts";
import { streamWriter, type StreamWriter } from "../http/stream-writer.ts";
import type { RuntimeSandbox } from "../sandbox.ts";
import { logger } from "../../lib/log.ts";
import { Kernel, KERNEL_SPECS, KernelStartError, type KernelSpec } from "./kernel.ts";

const LOG = logger("runtime");

/** E2B's language names (the SDKs' and their aliases) and the driver each runs on. */
const KERNELS: Record<string, KernelSpec> = {
  python: KERNEL_SPECS.python,
  python3: KERNEL_SPECS.python,
  js: KERNEL_SPECS.js,
  javascript: KERNEL_SPECS.js,
  ts: KERNEL_SPECS.ts,
  typescript: KERNEL_SPECS.ts,
  bash: KERNEL_SPECS.bash,
  r: KERNEL_SPECS.r,
};
const DEFAULT_LANGUAGE = "python";
/** The user kernels run as (E2B's), when the sandbox has it; else the sandbox's default user. */
const KERNEL_USER = "user";

/** What a sandbox's contexts leave in RuntimeSandbox.carried when it is Stop-paused: plain JSON (the
 * agent keeps it in a file over its restarts), so a context names its language, not its driver. */
const CARRIED = "interpreter.contexts";
interface CarriedContexts {
  contexts: { id: string; language: string; cwd: string }[];
  defaults: [language: string, id: string][];
}
const SPEC_OF_LANGUAGE = new Map(Object.values(KERNEL_SPECS).map((s) => [s.language as string, s as KernelSpec]));

/** The carried contexts, kept only where each part has the right type (a file could be cut short). */
function carriedContexts(value: unknown): CarriedContexts {
  const v = value as Partial<CarriedContexts> | undefined;
  const str = (x: unknown): x is string => typeof x === "string" && x.length > 0 && x.length <= 4096;
  return {
    contexts: (Array.isArray(v?.contexts) ? v.contexts : []).filter((c) => c && str(c.id) && str(c.cwd) && SPEC_OF_LANGUAGE.has(c.language)),
    defaults: (Array.isArray(v?.defaults) ? v.defaults : []).filter((d) => Array.isArray(d) && str(d[0]) && str(d[1])),
  };
}

class Contexts {
  readonly byId = new Map<string, Kernel>();
  readonly defaults = new Map<string, Promise<Kernel>>();
  /** The default contexts' ids, once started (what a Stop pause carries). */
  readonly #defaultIds = new Map<string, string>();
  readonly sbx: RuntimeSandbox;
  constructor(sbx: RuntimeSandbox) {
    this.sbx = sbx;
    // Contexts from before a Stop pause: the same ids, cwd and languages, started on their next cell.
    const carried = carriedContexts(sbx.carried.get(CARRIED));
    if (carried.contexts.length) LOG.info("code contexts kept from before (a Stop pause or an agent restart)", { sandboxId: sbx.id, contexts: carried.contexts.length });
    for (const c of carried.contexts) this.byId.set(c.id, new Kernel(c.id, SPEC_OF_LANGUAGE.get(c.language)!, c.cwd));
    for (const [lang, id] of carried.defaults) {
      const k = this.byId.get(id);
      if (!k) continue;
      this.defaults.set(lang, Promise.resolve(k));
      this.#defaultIds.set(lang, id);
    }
  }

  user() {
    const user = this.sbx.view.lookupUser(KERNEL_USER) ?? this.sbx.view.lookupUser(this.sbx.defaultUser);
    if (!user) throw new HttpError(500, `the sandbox has neither user '${KERNEL_USER}' nor '${this.sbx.defaultUser}'`);
    return user;
  }

  /** Starts `k`'s driver unless it runs (a new context, or one whose kernel a Stop pause ended). */
  async running(k: Kernel): Promise<Kernel> {
    try {
      await k.ensure(this.sbx, this.user());
    } catch (err) {
      if (err instanceof KernelStartError) {
        throw new HttpError(500, `could not start a ${k.language} kernel in sandbox ${this.sbx.id} (does its template have ${k.spec.requires}? the code-interpreter template does): ${err.message}`);
      }
      throw err;
    }
    return k;
  }

  async create(language: string | undefined, cwd: string | undefined): Promise<Kernel> {
    const lang = KERNELS[(language ?? DEFAULT_LANGUAGE).toLowerCase()];
    if (!lang) throw new HttpError(400, `no kernel for language '${language}' in this sandbox (available: ${Object.keys(KERNELS).join(", ")})`);
    const dir = cwd ?? this.sbx.defaultWorkdir ?? this.user().home;
    // Looked at through the pinned path as a command's cwd is (process/start.ts): a stat of
    // toHost's string would be walked again from the host's `/`, so a directory the tenant
    // swapped for a link meanwhile would have the answer tell whether a host directory exists.
    let isDir = false;
    try {
      isDir = lstatPinned(this.sbx.view, dir)?.isDirectory() ?? false;
    } catch (err) {
      if (err instanceof PathOutsideSandboxError) throw new HttpError(403, err.message);
      if (!(err as NodeJS.ErrnoException).code) throw err;
    }
    if (!isDir) throw new HttpError(400, `cwd '${dir}' does not exist or is not a directory`);
    const kernel = new Kernel(randomUUID(), lang, dir);
    this.byId.set(kernel.id, kernel);
    try {
      await this.running(kernel);
    } catch (err) {
      this.byId.delete(kernel.id);
      kernel.close();
      throw err;
    }
    this.save();
    return kernel;
  }

  /** The context a cell names, or its language's default context (started on first use). */
  async forExecute(contextId: string | undefined, language: string | undefined): Promise<Kernel> {
    if (contextId) {
      const k = this.byId.get(contextId);
      if (!k) throw new HttpError(404, `context ${contextId} not found`);
      return this.running(k);
    }
    const lang = KERNELS[(language ?? DEFAULT_LANGUAGE).toLowerCase()];
    if (!lang) throw new HttpError(400, `no kernel for language '${language}' in this sandbox (available: ${Object.keys(KERNELS).join(", ")})`);
    let k = this.defaults.get(lang.language);
    if (!k) {
      k = this.create(lang.language, undefined);
      this.defaults.set(lang.language, k);
      k.catch(() => this.defaults.delete(lang.language));
    }
    const kernel = await k;
    if (this.#defaultIds.get(lang.language) !== kernel.id) {
      this.#defaultIds.set(lang.language, kernel.id);
      this.save();
    }
    return this.running(kernel);
  }

  /** The contexts as a resume needs them, in `carried`, kept at once (the runtime keeps them until
   * the sandbox is deleted): called whenever a context comes or goes. */
  save(): void {
    const defaults = [...this.#defaultIds].filter(([, id]) => this.byId.has(id));
    const contexts = [...this.byId.values()].map((k) => ({ id: k.id, language: k.language, cwd: k.cwd }));
    this.sbx.carried.set(CARRIED, { contexts, defaults } satisfies CarriedContexts);
    this.sbx.saveCarried();
  }

  /** The sandbox is going (its kernels with it); what a Stop-paused one's resume needs is saved. */
  close(): void {
    this.save();
    for (const k of this.byId.values()) k.close();
    this.byId.clear();
    this.defaults.clear();
  }
}

const bySandbox = new WeakMap<RuntimeSandbox, Contexts>();
function contextsOf(sbx: RuntimeSandbox): Contexts {
  let c = bySandbox.get(sbx);
  if (!c) {
    const created = new Contexts(sbx);
    bySandbox.set(sbx, (c = created));
    sbx.onClose.add(() => created.close());
  }
  return c;
}

/** Both SDKs skip line types they do not know (their parsers switch on `type`). */
const HEARTBEAT = `${JSON.stringify({ type: "keepalive" })}\n`;
const HEARTBEAT_MS = 1_000;

/** The answers of the cells running now, and the one timer that sends them heartbeats: it runs
 * while cells run and stops a tick after the last one ended, not a timer made and cleared per cell. */
const beating = new Set<StreamWriter>();
let heartbeats: NodeJS.Timeout | undefined;
function heartbeat(out: StreamWriter): void {
  beating.add(out);
  heartbeats ??= setInterval(() => {
    if (!beating.size) {
      clearInterval(heartbeats);
      heartbeats = undefined;
    }
    for (const o of beating) o.write(HEARTBEAT);
  }, HEARTBEAT_MS).unref();
}

const describe = (k: Kernel) => ({ id: k.id, language: k.language, cwd: k.cwd });

async function execute(req: IncomingMessage, res: ServerResponse, sbx: RuntimeSandbox): Promise<void> {
  const parsed = parseExecuteRequest(await readJson(req, 2 * (1 << 20)));
  if (!parsed.ok) throw new HttpError(400, `invalid execute request: ${parsed.error}`);
  const { code, contextId, language, envVars } = parsed.value;
  const kernel = await contextsOf(sbx).forExecute(contextId, language);
  // The head leaves with the first line (a cell's first output or its end: the Python driver
  // holds the cell's number until then) or the first heartbeat, not in a packet of its own.
  res.writeHead(200, { "content-type": "application/x-ndjson", "cache-control": "no-store" });
  // Lines the driver sent together (a cell's last line and its end) leave in one write, with the
  // response's end when it comes in the same turn.
  const out = streamWriter(res);
  const run = kernel.execute(code, envVars, (line: OutputLine) => out.write(outputLineText(line)));
  let finished = false;
  // A proxy on the way (workerd's gateway) notices that the client left only when it next writes
  // to it, and a busy cell may print nothing for minutes: a line of a type the SDKs ignore, every
  // second, makes the close reach this response.
  heartbeat(out);
  // The client gone before the cell ends (the SDK's timeout aborts the request): interrupt it, so
  // the context is free for the next cell, as E2B's server does.
  res.once("close", () => {
    beating.delete(out);
    if (finished) return;
    LOG.info("cell interrupted: the client left before it ended", { sandboxId: sbx.id, context: kernel.id });
    run.cancel();
  });
  await run.done;
  finished = true;
  beating.delete(out);
  out.end();
}

type Handler = (req: IncomingMessage, res: ServerResponse, sbx: RuntimeSandbox, id?: string) => Promise<void>;

/** What a route asks of the sandbox's access token. E2B's SDKs (JS and Python) send `X-Access-Token`
 * on `POST /execute` only, never on `/contexts`: "required" there, "if-sent" on the context routes (a
 * token sent must be right; none sent passes, or the SDKs' context calls would break); none on
 * `/health`. The context routes run no code; what stays open there is upstream's surface. */
type TokenRule = "required" | "if-sent" | "none";

const ROUTES: { method: string; path: RegExp; token: TokenRule; handler: Handler }[] = [
  { method: "GET", path: /^\/health$/, token: "none", handler: async (_req, res) => void res.writeHead(200, { "content-type": "text/plain" }).end("OK") },
  { method: "POST", path: /^\/execute$/, token: "required", handler: execute },
  {
    method: "POST",
    path: /^\/contexts$/,
    token: "if-sent",
    handler: async (req, res, sbx) => {
      const parsed = parseCreateContextRequest(await readJson(req));
      if (!parsed.ok) throw new HttpError(400, `invalid context request: ${parsed.error}`);
      sendJson(res, 200, describe(await contextsOf(sbx).create(parsed.value.language, parsed.value.cwd)));
    },
  },
  { method: "GET", path: /^\/contexts$/, token: "if-sent", handler: async (_req, res, sbx) => sendJson(res, 200, [...contextsOf(sbx).byId.values()].map(describe)) },
  {
    method: "DELETE",
    path: /^\/contexts\/([^/]+)$/,
    token: "if-sent",
    handler: async (_req, res, sbx, id) => {
      const ctx = contextsOf(sbx);
      const k = ctx.byId.get(id!);
      if (!k) throw new HttpError(404, `context ${id} not found`);
      ctx.byId.delete(id!);
      for (const [lang, d] of ctx.defaults) if ((await d.catch(() => undefined)) === k) ctx.defaults.delete(lang);
      k.close();
      ctx.save();
      res.writeHead(204).end();
    },
  },
  {
    method: "POST",
    path: /^\/contexts\/([^/]+)\/restart$/,
    token: "if-sent",
    handler: async (_req, res, sbx, id) => {
      const ctx = contextsOf(sbx);
      const k = ctx.byId.get(id!);
      if (!k) throw new HttpError(404, `context ${id} not found`);
      // A kernel that is not running starts fresh: that is the restart.
      if (k.running) await k.restart();
      else await ctx.running(k);
      res.writeHead(204).end();
    },
  },
];

/** Starts `sbx`'s default Python context before anyone asks (a warm sandbox of a template with the
 * interpreter), as E2B's image has its Jupyter kernel running: a claim's first cell finds it up. */
export function prewarm(sbx: RuntimeSandbox): void {
  contextsOf(sbx)
    .forExecute(undefined, DEFAULT_LANGUAGE)
    .catch((err: unknown) => LOG.warn("the default Python context did not start ahead (it starts with the first cell)", { sandboxId: sbx.id, err: (err as Error).message }));
}

/** Serves one request to port 49999 of `sbx`. */
export async function serveInterpreter(req: IncomingMessage, res: ServerResponse, sbx: RuntimeSandbox, url: URL): Promise<void> {
  for (const r of ROUTES) {
    const m = r.path.exec(url.pathname);
    if (!m || r.method !== req.method) continue;
    const token = presentedToken(req);
    // checkToken is constant time, and true for a sandbox without a token (envd's secure: false).
    if ((r.token === "required" || (r.token === "if-sent" && token !== undefined)) && !sbx.checkToken(token)) throw new HttpError(401, UNAUTHORIZED);
    return r.handler(req, res, sbx, m[1] && decodeURIComponent(m[1]));
  }
  throw new HttpError(404, `no route for ${req.method} ${url.pathname} on the code interpreter`);
}
