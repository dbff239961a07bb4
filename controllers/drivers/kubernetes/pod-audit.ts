// The L7 audit records of governed pods' traffic-proxy sidecars, collected by the agent (issue 14;
// shapes and bounds in schema/protocol/pod-audit.ts) and kept where the local driver's proxy's go
// (the driver's `setNetworkAudit` sink: the agent's per-sandbox network audit, read through
// `GET /sandboxes/{id}/network/audit`). The sidecar keeps the records of the requests it inspected
// (controllers/traffic/audit-buffer.ts); the agent GETs POD_AUDIT_PATH on the pod's health port
// with the pod's pull token, over a connection it opens to the pod (as its ingress does): nothing
// in the pod connects out for it, and no container but the sidecar has the token (it is in the
// pod's Secret, mounted into the sidecar only), so the tenant's code can neither drain its own
// records nor hand the agent others.
//
// What a pod answers is still tenant-influenced bytes (the hosts and paths its code asked for), so:
//   - bounded: MAX_POD_AUDIT_BYTES read at most (more: the pull is dropped), the schema's counts and
//     lengths, each sandbox pulled at most every PULL_EVERY_MS, MAX_PULLS pulls at once across
//     sandboxes, the least recently pulled first (so a pod that answers slowly cannot keep the
//     others from their turn), each given PULL_TIMEOUT_MS;
//   - attributed by the agent: each record is the sandbox's whose pod the agent pulled from (its
//     address from the pod's status, its token the one the agent wrote for that pod), whatever the
//     record says, so no pod can blame another sandbox for a request.
import { AUDIT_ACK_HEADER, MAX_POD_AUDIT_BYTES, PodAuditBatchSchema, POD_AUDIT_PATH } from "../../../schema/protocol/pod-audit.ts";
import type { NetworkAuditRecord } from "../../../schema/api/network-audit.ts";
import { boundedGet } from "../../lib/bounded-get.ts";
import { podAuditPullFailures, podAuditRecords } from "../../lib/metrics.ts";

/** How often each sandbox's sidecar is asked (its buffer holds MAX_POD_AUDIT_RECORDS meanwhile). */
export const PULL_EVERY_MS = 2_000;
const PULL_TIMEOUT_MS = 2_000;
const MAX_PULLS = 16;
/** How often free slots are filled: at most MAX_PULLS pulls start per tick (64 a second), so with
 * many inspected pods each is asked less often than PULL_EVERY_MS (1,000 pods: every ~16 s). */
const TICK_MS = 250;
/** A sandbox whose pulls go wrong is logged about at most this often. */
const WARN_EVERY_MS = 60_000;

export interface PodAuditTarget {
  /** The sidecar's audit endpoint's base (`http://<pod IP>:<health port>`). */
  url: string;
  token: string;
}

export interface PodAuditOptions {
  /** The sandboxes whose pods may hold records (with a proxy enforcing L7 rules). */
  sandboxes(): Iterable<string>;
  /** Where to pull a sandbox's records from and with what; undefined: not now (no pod IP yet). */
  targetOf(sandboxId: string): PodAuditTarget | undefined;
  /** Where checked records go, the sandbox set by the agent. */
  sink(record: NetworkAuditRecord): void;
  log?(line: string): void;
  now?: () => number;
}

export interface AuditPullResult {
  kept: number;
  /** Records the sidecar could not keep (its buffer was full). */
  dropped: number;
  error?: string;
}

export class PodAuditCollector {
  readonly #o: PodAuditOptions;
  readonly #now: () => number;
  /** When each sandbox was last pulled (and whether one is in flight). */
  readonly #last = new Map<string, { at: number; pulling: boolean; warned: number; ack?: string }>();
  #timer: NodeJS.Timeout | null = null;
  #inFlight = 0;

  constructor(o: PodAuditOptions) {
    this.#o = o;
    this.#now = o.now ?? Date.now;
  }

  start(): void {
    this.#timer ??= setInterval(() => void this.tick(), TICK_MS).unref();
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
  }

  /** One round: pulls the sandboxes that are due, least recently pulled first, while slots are
   * free. Resolves with the sandboxes pulled once their pulls are done. */
  async tick(): Promise<string[]> {
    const now = this.#now();
    const live = new Set(this.#o.sandboxes());
    for (const id of this.#last.keys()) if (!live.has(id)) this.#last.delete(id);
    const due = [...live].map((id) => [id, this.#last.get(id)] as const).filter(([, l]) => !l || (!l.pulling && now - l.at >= PULL_EVERY_MS));
    due.sort((a, b) => (a[1]?.at ?? 0) - (b[1]?.at ?? 0));
    const started = due.slice(0, Math.max(0, MAX_PULLS - this.#inFlight)).map(([id]) => id);
    await Promise.all(started.map((id) => this.pull(id).then((r) => this.#warn(id, r))));
    return started;
  }

  #warn(id: string, r: AuditPullResult): void {
    const l = this.#last.get(id);
    if (!l || !(r.error || r.dropped)) return;
    const now = this.#now();
    if (now - l.warned < WARN_EVERY_MS) return;
    l.warned = now;
    // The error text is ours or a zod issue's message (bounded); the pod's body is never logged.
    this.#o.log?.(`network audit of sandbox ${id}: ${r.error ? `not taken: ${r.error.slice(0, 200)}` : ""}${r.dropped ? `${r.error ? "; " : ""}${r.dropped} record(s) dropped by its sidecar` : ""}`);
  }

  /** Pulls the sandbox's records now and keeps them. */
  async pull(sandboxId: string): Promise<AuditPullResult> {
    const l = this.#last.get(sandboxId) ?? { at: 0, pulling: false, warned: -Infinity };
    this.#last.set(sandboxId, l);
    l.at = this.#now();
    const at = this.#o.targetOf(sandboxId);
    // No running pod with an address yet (or any more): nothing to pull now.
    if (!at) return { kept: 0, dropped: 0 };
    l.pulling = true;
    this.#inFlight++;
    try {
      // The last batch kept is acknowledged (the sidecar hands one again until it is); "none"
      // before any, which still says this agent acknowledges.
      const body = await boundedGet(new URL(POD_AUDIT_PATH, at.url), { authorization: `Bearer ${at.token}`, [AUDIT_ACK_HEADER]: l.ack ?? "none" }, { maxBytes: MAX_POD_AUDIT_BYTES, timeoutMs: PULL_TIMEOUT_MS, who: "the sidecar" });
      let json: unknown;
      try {
        json = JSON.parse(body);
      } catch {
        podAuditPullFailures.inc({ reason: "not_json" });
        return { kept: 0, dropped: 0, error: "not JSON" };
      }
      const parsed = PodAuditBatchSchema.safeParse(json);
      if (!parsed.success) {
        podAuditPullFailures.inc({ reason: "invalid" });
        return { kept: 0, dropped: 0, error: `not audit records: ${parsed.error.issues[0]?.message ?? "invalid"}` };
      }
      // The batch this pull acknowledged, handed again (a sidecar that did not take the
      // acknowledgement): kept once only.
      if (parsed.data.batch !== undefined && parsed.data.batch === l.ack) return { kept: 0, dropped: 0 };
      for (const { sandbox: _ignored, ...r } of parsed.data.records) this.#o.sink({ ...r, sandbox: sandboxId });
      if (parsed.data.batch !== undefined) l.ack = parsed.data.batch;
      podAuditRecords.inc({ outcome: "kept" }, parsed.data.records.length);
      podAuditRecords.inc({ outcome: "dropped" }, parsed.data.dropped);
      return { kept: parsed.data.records.length, dropped: parsed.data.dropped };
    } catch (err) {
      podAuditPullFailures.inc({ reason: "request" });
      return { kept: 0, dropped: 0, error: (err as Error).message };
    } finally {
      l.pulling = false;
      this.#inFlight--;
    }
  }
}
