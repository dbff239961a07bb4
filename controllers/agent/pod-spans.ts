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
//     MAX_PULLS pulls at once across sandboxes, the least recently pulled first (so a pod that
//     answers slowly, or a busy sandbox, cannot keep the others from their turn), each given
//     PULL_TIMEOUT_MS;
//   - only parents that will get a span are kept: an unsampled traceparent (the runtime records
//     nothing for it) is not, and one whose request never reached the runtime is forgotten;
//   - attributed by the agent: each span's resource is `service.name` agent-runtime and the
//     `sandbox.id` the agent pulled from, whatever the payload says (its own `sandbox.id`
//     attribute is overwritten);
//   - placed by the agent: its span id is one the agent makes (a pod's own could repeat its
//     parent's, or another span's of the trace it was handed, and break the trace's tree), and its
//     start and end are kept within the agent's own window for the request, from when the ingress
//     handed it on to when the pull began (a pod cannot stretch a trace, or date a span before
//     the request existed);
//   - only what the agent asked for: a span is forwarded only if its trace id and parent are an
//     `ingress` span the agent handed that very sandbox (`handed`), once; anything else (another
//     team's trace id, a made-up parent, a repeat) is refused and counted
//     (`sandbox_agent_pod_spans_total{outcome}`, with a warning at most once a minute per sandbox
//     for a pull that refused spans or failed).
import { SpanKind } from "@opentelemetry/api";
import { resourceFromAttributes, type Resource } from "@opentelemetry/resources";
import type { ReadableSpan } from "@opentelemetry/sdk-trace";
import { MAX_RUNTIME_SPANS_BYTES, RUNTIME_SPANS_PATH, RuntimeSpansSchema } from "../../schema/protocol/runtime-spans.ts";
import { parseTraceparent, randomHex, recordedSpan } from "../../lib/tracing/span-recorder.ts";
import { RUNTIME_SCOPE } from "../lib/tracing.ts";
import { podSpansTotal } from "../lib/metrics.ts";
import { logger } from "../lib/log.ts";
import { boundedGet } from "../lib/bounded-get.ts";

const log = logger("pod-spans");

/** How long a handed parent waits for its span (a command stream may stay open that long). */
const HANDED_TTL_MS = 15 * 60_000;
/** Parents kept per sandbox (past it the oldest is forgotten: its span will be refused). */
const MAX_HANDED = 1024;
const PULL_EVERY_MS = 1_000;
/** While only older requests are open (a long stream), how often their sandbox is asked. */
const IDLE_PULL_MS = 10_000;
/** A pull is one small GET to a pod on the cluster network (at most MAX_RUNTIME_SPANS_BYTES): a
 * pod slower than this is dropped for the tick rather than holding one of the MAX_PULLS slots. */
const PULL_TIMEOUT_MS = 2_000;
/** A sandbox whose pulls go wrong is logged about at most this often. */
const WARN_EVERY_MS = 60_000;
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
  /** `<traceId>-<spanId>` of each handed ingress span → when it was handed (it is waited for
   * until HANDED_TTL_MS later). */
  parents: Map<string, number>;
  fresh: boolean;
  lastPull: number;
  pulling: boolean;
  lastWarn: number;
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
    // Unsampled: the runtime's sampler follows its parent and records no span for it.
    if (!ctx || !(ctx.traceFlags & 1)) return;
    let p = this.#pending.get(sandboxId);
    if (!p) {
      p = { parents: new Map(), fresh: false, lastPull: 0, pulling: false, lastWarn: -Infinity, resource: resourceFromAttributes({ "service.name": "agent-runtime", "sandbox.id": sandboxId }) };
      this.#pending.set(sandboxId, p);
    }
    if (p.parents.size >= MAX_HANDED) p.parents.delete(p.parents.keys().next().value!);
    p.parents.set(`${ctx.traceId}-${ctx.spanId}`, this.#now());
    p.fresh = true;
    this.#timer ??= setInterval(() => void this.tick(), PULL_EVERY_MS).unref();
  }

  /** The request handed with `traceparent` never reached the sandbox's runtime (the forward
   * failed before an answer): no span will come for it. */
  forget(sandboxId: string, traceparent: string | undefined): void {
    const ctx = traceparent ? parseTraceparent(traceparent) : undefined;
    if (ctx) this.#pending.get(sandboxId)?.parents.delete(`${ctx.traceId}-${ctx.spanId}`);
  }

  /** Parents kept for a sandbox (what the tests can see of the bound). */
  waiting(sandboxId: string): number {
    return this.#pending.get(sandboxId)?.parents.size ?? 0;
  }

  /** One round (the timer's, every PULL_EVERY_MS): forgets expired parents and starts the pulls
   * that are due, least recently pulled first, while slots are free. Resolves with the sandboxes
   * pulled once their pulls are done. */
  async tick(): Promise<string[]> {
    const now = this.#now();
    const due: [string, Pending][] = [];
    for (const [id, p] of this.#pending) {
      for (const [k, handedAt] of p.parents) if (handedAt + HANDED_TTL_MS <= now) p.parents.delete(k);
      if (!p.parents.size && !p.pulling) {
        this.#pending.delete(id);
        continue;
      }
      if (p.parents.size && !p.pulling && (p.fresh || now - p.lastPull >= IDLE_PULL_MS)) due.push([id, p]);
    }
    if (!this.#pending.size && this.#timer) {
      clearInterval(this.#timer);
      this.#timer = null;
    }
    // The Map's order is when a sandbox was first handed a request: taking the first MAX_PULLS
    // each round would serve the same sandboxes forever once more than that are busy.
    due.sort((a, b) => a[1].lastPull - b[1].lastPull);
    const started = due.slice(0, Math.max(0, MAX_PULLS - this.#inFlight)).map(([id]) => id);
    await Promise.all(started.map((id) => this.pull(id).then((r) => this.#count(id, r))));
    return started;
  }

  #count(sandboxId: string, r: PullResult): void {
    if (r.forwarded) podSpansTotal.inc({ outcome: "forwarded" }, r.forwarded);
    if (r.refused) podSpansTotal.inc({ outcome: "refused" }, r.refused);
    if (r.dropped) podSpansTotal.inc({ outcome: "dropped" }, r.dropped);
    if (r.error) podSpansTotal.inc({ outcome: "error" });
    const p = this.#pending.get(sandboxId);
    if (!p || !(r.refused || r.error)) return;
    const now = this.#now();
    if (now - p.lastWarn < WARN_EVERY_MS) return;
    p.lastWarn = now;
    // The error text is bounded (ours, or a zod issue's message); the pod's body is never logged.
    log.warn("pod runtime spans not taken", { sandboxId, refused: r.refused, dropped: r.dropped, ...(r.error ? { error: r.error.slice(0, 200) } : {}) });
  }

  /** Pulls the sandbox's spans now and forwards those it asked for. */
  async pull(sandboxId: string): Promise<PullResult> {
    const p = this.#pending.get(sandboxId);
    const at = this.#opts.runtimeOf(sandboxId);
    if (!p) return { forwarded: 0, refused: 0, dropped: 0, error: "nothing handed" };
    p.fresh = false;
    const pulledAt = (p.lastPull = this.#now());
    if (!at) return { forwarded: 0, refused: 0, dropped: 0, error: "no runtime" };
    p.pulling = true;
    this.#inFlight++;
    try {
      const body = await boundedGet(new URL(RUNTIME_SPANS_PATH, at.url), { "e2b-sandbox-id": sandboxId, ...(at.token ? { "x-access-token": at.token } : {}) }, { maxBytes: MAX_RUNTIME_SPANS_BYTES, timeoutMs: PULL_TIMEOUT_MS, who: "runtime" });
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
        const handedAt = p.parents.get(key);
        if (handedAt === undefined) {
          refused++;
          continue;
        }
        p.parents.delete(key);
        const attributes = { ...s.attributes, "sandbox.id": sandboxId };
        const within = (ms: number) => Math.min(Math.max(ms, handedAt), pulledAt);
        const placed = { spanId: randomHex(16), startMs: within(s.startMs), endMs: within(s.endMs) };
        out.push(recordedSpan({ ...s, ...placed, kind: SpanKind.SERVER, status: { code: s.status }, attributes }, p.resource, { name: RUNTIME_SCOPE }));
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
