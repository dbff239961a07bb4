// The pod sidecar's L7 audit records, kept for its agent to collect (schema/protocol/pod-audit.ts):
// at most MAX_POD_AUDIT_RECORDS wait between two pulls (more are counted as dropped), each field cut
// to the schema's bounds here, so a request with a long path is kept (cut) rather than making the
// agent refuse the whole batch; a pull hands over at most MAX_POD_AUDIT_BYTES of them (`take`), the
// rest wait for the next. A batch is handed over (again, until a pull acknowledges it) to a request
// carrying the pull token the agent wrote into the pod's Secret (the file is read at each pull: the agent may write a new one, and the
// kubelet swaps the file). Without a token file nothing is handed over. The records also go to
// stdout (`audit <json>`), for `kubectl logs`.
import { randomBytes, timingSafeEqual } from "node:crypto";
import { readFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { NetworkAuditRecord } from "../../schema/api/network-audit.ts";
import { AUDIT_ACK_HEADER, MAX_AUDIT_HOST, MAX_AUDIT_PATH, MAX_AUDIT_RULE, MAX_AUDIT_TOOL, MAX_POD_AUDIT_BYTES, MAX_POD_AUDIT_RECORDS, type PodAuditBatch } from "../../schema/protocol/pod-audit.ts";

export class AuditBuffer {
  #records: PodAuditBatch["records"] = [];
  #dropped = 0;
  /** The batch last handed over and not yet acknowledged. */
  #unacked: PodAuditBatch | null = null;
  readonly #tokenFile: string | undefined;

  /** `tokenFile`: where the pull token is (the Secret's mount); none: records are never handed over. */
  constructor(tokenFile: string | undefined) {
    this.#tokenFile = tokenFile;
  }

  add(r: NetworkAuditRecord): void {
    if (this.#records.length >= MAX_POD_AUDIT_RECORDS) return void this.#dropped++;
    const method = /^[A-Za-z-]{1,20}$/.test(r.method) ? r.method : "OTHER";
    this.#records.push({
      host: r.host.slice(0, MAX_AUDIT_HOST),
      method,
      path: r.path.slice(0, MAX_AUDIT_PATH),
      rule: r.rule.slice(0, MAX_AUDIT_RULE),
      status: Number.isInteger(r.status) && r.status >= 0 && r.status <= 999 ? r.status : 0,
      bytesOut: safe(r.bytesOut),
      bytesIn: safe(r.bytesIn),
      ...(r.tool ? { tool: r.tool.slice(0, MAX_AUDIT_TOOL) } : {}),
      refused: r.refused,
    });
  }

  /** What waits, oldest first: as many records as fit MAX_POD_AUDIT_BYTES
   * encoded, the rest kept for the next pull. The fields are bounded in characters, but a tenant
   * chooses characters that encode large (a control character is 6 bytes JSON-escaped), so a full
   * buffer can exceed what the agent reads; an answer past it is refused whole, and handing it over
   * would lose every record in it, those the tenant wanted hidden included. One record is at most
   * ~11 KB encoded, so each pull hands over some. */
  take(): PodAuditBatch {
    let size = Buffer.byteLength(JSON.stringify({ records: [], dropped: this.#dropped }));
    let n = 0;
    for (; n < this.#records.length; n++) {
      const more = Buffer.byteLength(JSON.stringify(this.#records[n])) + (n ? 1 : 0);
      if (size + more > MAX_POD_AUDIT_BYTES) break;
      size += more;
    }
    const out = { records: this.#records.slice(0, n), dropped: this.#dropped };
    this.#records = this.#records.slice(n);
    this.#dropped = 0;
    return out;
  }

  /** Answers a pull: 200 with the batch to the token's bearer, 403 to anyone else. The batch handed
   * last is handed again until a pull acknowledges it by id (an answer can be lost after it left:
   * the agent's timeout, a connection cut); ids are random, so a restarted sidecar's first batch
   * cannot be taken for one the agent already kept. A pull without the header is an agent older
   * than acknowledgements (the sidecar's image is rolled apart from the agent's): it gets the batch
   * once, without the id its strict schema would refuse. */
  serve(req: IncomingMessage, res: ServerResponse): void {
    if (req.method !== "GET" || !this.#authorized(req.headers.authorization)) return void res.writeHead(403).end();
    const ack = req.headers[AUDIT_ACK_HEADER];
    if (this.#unacked && ack === this.#unacked.batch) this.#unacked = null;
    const batch = this.#unacked ?? { ...this.take(), batch: randomBytes(8).toString("hex") };
    const acks = typeof ack === "string";
    this.#unacked = acks ? batch : null;
    const { batch: _id, ...once } = batch;
    const body = JSON.stringify(acks ? batch : once);
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body), "cache-control": "no-store" }).end(body);
  }

  #authorized(header: string | undefined): boolean {
    if (!this.#tokenFile || !header?.startsWith("Bearer ")) return false;
    let token: Buffer;
    try {
      token = readFileSync(this.#tokenFile);
    } catch {
      return false;
    }
    const given = Buffer.from(header.slice("Bearer ".length));
    return token.length >= 16 && given.length === token.length && timingSafeEqual(given, token);
  }
}

function safe(n: number): number {
  return Number.isSafeInteger(n) && n >= 0 ? n : 0;
}
