// A pod runtime's spans, collected by the agent (issue 15.1; shapes and bounds in
// schema/protocol/runtime-spans.ts). With --pod-runtime-tracing each pod's runtime keeps the spans
// of the requests it served (controllers/runtime/agent-spans.ts) and the agent pulls them: a GET of
// RUNTIME_SPANS_PATH with the sandbox's own access token, over a connection the agent opens to the
// pod as its ingress does. Nothing in the pod connects out for it, so a governed pod (whose every
// connection out goes to its traffic-proxy) is traced as any other, and the collector's address is
// never in the pod.
//
// What a pod answers is the tenant's data (its commands run as root beside the runtime), so:
//   - bounded: MAX_RUNTIME_SPANS_BYTES read at most (more: the pull is dropped), the schema's
//     counts and lengths, one pull per sandbox a second at most and only while it has requests
//     whose spans have not come back (or at most every IDLE_PULL_MS while a long one is open),
//     MAX_PULLS pulls at once across sandboxes;
//   - attributed by the agent: each span's resource is `service.name` agent-runtime and the
//     `sandbox.id` the agent pulled from, whatever the payload says (its own `sandbox.id`
//     attribute is overwritten);
//   - only what the agent asked for: a span is forwarded only if its trace id and parent are an
//     `ingress` span the agent handed that very sandbox (`handed`), once; anything else (another
//     team's trace id, a made-up parent, a repeat) is refused and counted.
import { SpanKind } from "@opentelemetry/api";
import { resourceFromAttributes, type Resource } from "@opentelemetry/resources";
import type { ReadableSpan } from "@opentelemetry/sdk-trace";
import { MAX_RUNTIME_SPANS_BYTES, RUNTIME_SPANS_PATH, RuntimeSpansSchema } from "../../schema/protocol/runtime-spans.ts";
import { parseTraceparent, recordedSpan } from "../../lib/tracing/span-recorder.ts";
import { RUNTIME_SCOPE } from "../lib/tracing.ts";

/** How long a handed parent waits for its span (a command stream may stay open that long). */
const HANDED_TTL_MS = 15 * 60_000;
/** Parents kept per sandbox (past it the oldest is forgotten: its span will be refused). */
const MAX_HANDED = 1024;
const PULL_EVERY_MS = 1_000;
/** While only older requests are open (a long stream), how often their sandbox is asked. */
const IDLE_PULL_MS = 10_000;
const PULL_TIMEOUT_MS = 5_000;
/** Pulls in flight at once (the rest wait for the next tick): a busy cluster's agent is not a
 * thousand GETs a second. */
const MAX_PULLS = 16;

export interface PodSpanOptions {
  /** Where the sandbox's runtime is and its access token (undefined: not a pod, or gone). */
  runtimeOf(sandboxId: string): { url: string; token?: string } | undefined;
  /** Hands checked spans on (the agent's exporter: tracing.ts forwardSpans). */
  forward(spans: ReadableSpan[]): void;
  now?: () => number;
}

export interface PullResult {
  forwarded: number;
  refused: number;
  /** Spans the runtime itself could not keep (its buffer was full). */
  dropped: number;
  error?: string;
}

interface Pending {
  /** `<traceId>-<spanId>` of each handed ingress span → when it stops being waited for. */
  parents: Map<string, number>;
  fresh: boolean;
  lastPull: number;
  pulling: boolean;
  resource: Resource;
}

export class PodSpanCollector {
  readonly #opts: PodSpanOptions;
  readonly #now: () => number;
  readonly #pending = new Map<string, Pending>();
  #timer: NodeJS.Timeout | null = null;
  #inFlight = 0;

  constructor(opts: PodSpanOptions) {
    this.#opts = opts;
    this.#now = opts.now ?? Date.now;
  }

  /** The ingress handed `traceparent` (its own span's) to the sandbox's pod runtime. */
  handed(sandboxId: string, traceparent: string | undefined): void {
    const ctx = traceparent ? parseTraceparent(traceparent) : undefined;
    if (!ctx) return;
    let p = this.#pending.get(sandboxId);
    if (!p) {
      p = { parents: new Map(), fresh: false, lastPull: 0, pulling: false, resource: resourceFromAttributes({ "service.name": "agent-runtime", "sandbox.id": sandboxId }) };
      this.#pending.set(sandboxId, p);
    }
    if (p.parents.size >= MAX_HANDED) p.parents.delete(p.parents.keys().next().value!);
    p.parents.set(`${ctx.traceId}-${ctx.spanId}`, this.#now() + HANDED_TTL_MS);
    p.fresh = true;
    this.#timer ??= setInterval(() => this.#tick(), PULL_EVERY_MS).unref();
  }

  #tick(): void {
    const now = this.#now();
    for (const [id, p] of this.#pending) {
      for (const [k, until] of p.parents) if (until <= now) p.parents.delete(k);
      if (!p.parents.size) {
        this.#pending.delete(id);
        continue;
      }
      if (this.#inFlight < MAX_PULLS && !p.pulling && (p.fresh || now - p.lastPull >= IDLE_PULL_MS)) void this.pull(id);
    }
    if (!this.#pending.size && this.#timer) {
      clearInterval(this.#timer);
      this.#timer = null;
    }
  }

  /** Pulls the sandbox's spans now and forwards those it asked for. */
  async pull(sandboxId: string): Promise<PullResult> {
    const p = this.#pending.get(sandboxId);
    const at = this.#opts.runtimeOf(sandboxId);
    if (!p || !at) return { forwarded: 0, refused: 0, dropped: 0, error: p ? "no runtime" : "nothing handed" };
    p.fresh = false;
    p.lastPull = this.#now();
    p.pulling = true;
    this.#inFlight++;
    try {
      const body = await boundedGet(new URL(RUNTIME_SPANS_PATH, at.url), { "e2b-sandbox-id": sandboxId, ...(at.token ? { "x-access-token": at.token } : {}) });
      let json: unknown;
      try {
        json = JSON.parse(body);
      } catch {
        return { forwarded: 0, refused: 0, dropped: 0, error: "not JSON" };
      }
      const parsed = RuntimeSpansSchema.safeParse(json);
      if (!parsed.success) return { forwarded: 0, refused: 0, dropped: 0, error: `not runtime spans: ${parsed.error.issues[0]?.message ?? "invalid"}` };
      const out: ReadableSpan[] = [];
      let refused = 0;
      for (const s of parsed.data.spans) {
        const key = `${s.traceId}-${s.parentSpanId}`;
        if (!p.parents.delete(key)) {
          refused++;
          continue;
        }
        const attributes = { ...s.attributes, "sandbox.id": sandboxId };
        out.push(recordedSpan({ ...s, kind: SpanKind.SERVER, status: { code: s.status }, attributes }, p.resource, { name: RUNTIME_SCOPE }));
      }
      if (out.length) this.#opts.forward(out);
      return { forwarded: out.length, refused, dropped: parsed.data.dropped };
    } catch (err) {
      return { forwarded: 0, refused: 0, dropped: 0, error: (err as Error).message };
    } finally {
      p.pulling = false;
      this.#inFlight--;
    }
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
    this.#pending.clear();
  }
}

/** The body of a GET, refused past MAX_RUNTIME_SPANS_BYTES or PULL_TIMEOUT_MS. */
async function boundedGet(url: URL, headers: Record<string, string>): Promise<string> {
  const res = await fetch(url, { headers, signal: AbortSignal.timeout(PULL_TIMEOUT_MS) });
  if (res.status !== 200) {
    await res.body?.cancel();
    throw new Error(`runtime answered ${res.status}`);
  }
  if (Number(res.headers.get("content-length") ?? 0) > MAX_RUNTIME_SPANS_BYTES) {
    await res.body?.cancel();
    throw new Error(`answer over ${MAX_RUNTIME_SPANS_BYTES} bytes`);
  }
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of res.body ?? []) {
    size += chunk.byteLength;
    if (size > MAX_RUNTIME_SPANS_BYTES) throw new Error(`answer over ${MAX_RUNTIME_SPANS_BYTES} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString("utf8");
}
