// The agent of bench/kube.ts: `controllers/agent/main.ts` as deployed (same flags), with two
// bench-only instruments attached from outside before it starts, driven over the IPC channel the
// bench opens (process.send / "message"):
//   {op: "hold"}     new pool members offered from now on wait before their first pass until
//                    {op: "release"} (their passes requeue themselves meanwhile, holding no worker):
//                    the refill still happens, after the round, so a round's claims are measured
//                    without it (the edge-only side holds its scripted agent's alike);
//   {op: "trace"}    the claims' timestamps since the last trace, per claim: offered (the intent
//                    frame arrived), pass started, /init sent and answered, acked (the ack handed
//                    to the link, which sends it in the same microtask turn); and the TLS
//                    connections the agent opened since (tls.connect: the API server's, each a
//                    handshake on both sides), and the agent's event-loop delay since (p50, p99,
//                    max, ms: how long a ready answer, an /init's included, waited for the loop);
//                    and the refills since: each new pool member's intent arrival and the start of
//                    its first pass that did work (a held one's after the release), to place them
//                    against the claims' timestamps.
// Each op is answered with {op, ...} once done. Nothing here changes what a pass does.
import http from "node:http";
import { monitorEventLoopDelay } from "node:perf_hooks";
import tls from "node:tls";
import { Reconciler } from "../controllers/agent/reconciler.ts";
import { Link } from "../controllers/agent/link.ts";
import type { Intent } from "../schema/protocol/index.ts";

export interface ClaimTrace {
  id: string;
  offered: number;
  passStart?: number;
  initStart?: number;
  initEnd?: number;
  acked?: number;
}

let hold: { promise: Promise<void>; release(): void } | undefined;
/** Pool members first offered while a hold was on: their first pass waits for its release. */
const held = new Set<string>();
const known = new Set<string>();
let traces = new Map<string, ClaimTrace>();
let tlsConnects = 0;
/** A new pool member: its intent's arrival, and when its first pass that did work started. */
export interface RefillTrace {
  offered: number;
  passStart?: number;
}
let refills = new Map<string, RefillTrace>();
export interface LoopDelay {
  p50: number;
  p99: number;
  max: number;
}
const loop = monitorEventLoopDelay({ resolution: 5 });
loop.enable();

const connect = tls.connect;
tls.connect = function (this: unknown, ...args: Parameters<typeof connect>) {
  tlsConnects++;
  return connect.apply(this, args);
} as typeof connect;

const offer = Reconciler.prototype.offer;
Reconciler.prototype.offer = function (this: Reconciler, intent: Intent, traceparent?: string) {
  const id = intent.sandboxId;
  if (hold && intent.owner.kind === "pool" && !known.has(id)) held.add(id);
  if (intent.owner.kind === "pool" && intent.desired.state === "running" && !known.has(id)) refills.set(id, { offered: performance.now() });
  known.add(id);
  if (intent.owner.kind === "sandbox" && intent.desired.state === "running" && !traces.has(id)) traces.set(id, { id, offered: performance.now() });
  return offer.call(this, intent, traceparent);
};

const reconcile = Reconciler.prototype.reconcile;
Reconciler.prototype.reconcile = async function (this: Reconciler, id: string) {
  const t = traces.get(id);
  if (t && t.passStart === undefined) t.passStart = performance.now();
  // A held member's pass looks again shortly rather than wait in its worker: the workers stay free
  // for the rest of the pool lane's work (a claimed sandbox's follow-up passes), which is not held.
  if (held.has(id) && hold) return { requeueAfterMs: 50 };
  held.delete(id);
  const r = refills.get(id);
  if (r && r.passStart === undefined) r.passStart = performance.now();
  return reconcile.call(this, id);
};

const ack = Link.prototype.ack;
Link.prototype.ack = function (this: Link, item: Parameters<typeof ack>[0]) {
  const t = traces.get(item.sandboxId);
  if (t && t.acked === undefined) t.acked = performance.now();
  return ack.call(this, item);
};

// /init through node:http (controllers/lib/bounded-post.ts looks up http.request at each call):
// sent, and answered (its headers: where boundedPost resolves for a 2xx, as fetch did).
const request = http.request;
http.request = function (this: unknown, ...args: unknown[]) {
  const url = args[0] instanceof URL ? args[0] : undefined;
  const opts = args[1] as { headers?: Record<string, string> } | undefined;
  const id = url?.pathname.endsWith("/init") ? opts?.headers?.["e2b-sandbox-id"] : undefined;
  const t = id ? traces.get(id) : undefined;
  if (t && t.initStart === undefined) t.initStart = performance.now();
  const req = (request as (...a: unknown[]) => http.ClientRequest).apply(this, args);
  if (t) {
    const end = () => {
      if (t.initEnd === undefined) t.initEnd = performance.now();
    };
    req.once("response", end);
    req.once("error", end);
  }
  return req;
} as typeof http.request;

process.on("message", (msg: { op: string }) => {
  if (msg.op === "hold") {
    if (!hold) {
      let release!: () => void;
      const promise = new Promise<void>((ok) => (release = ok));
      hold = { promise, release };
    }
  } else if (msg.op === "release") {
    hold?.release();
    hold = undefined;
    held.clear();
  } else if (msg.op === "trace") {
    const loopDelay: LoopDelay = { p50: loop.percentile(50) / 1e6, p99: loop.percentile(99) / 1e6, max: loop.max / 1e6 };
    process.send!({ op: "trace", traces: [...traces.values()], refills: [...refills.values()], tlsConnects, loopDelay, origin: performance.timeOrigin });
    traces = new Map();
    refills = new Map();
    tlsConnects = 0;
    loop.reset();
    return;
  }
  process.send!({ op: msg.op });
});
// The channel must not keep a stopping agent alive.
process.channel?.unref();

await import("../controllers/agent/main.ts");
