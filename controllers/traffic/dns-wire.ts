// DNS messages as the traffic-proxy's resolver reads and writes them (RFC 1035): one question in,
// an answer of A/AAAA records (or none) and a response code out. Pure; nothing here resolves.
import { parseIp, type Ip } from "../../schema/egress/address.ts";

export interface DnsQuestion {
  id: number;
  /** Lower case, without the trailing dot. */
  name: string;
  type: number;
  /** The question section as it came, echoed in the answer. */
  raw: Buffer;
  /** Whether the client asked for recursion (echoed). */
  rd: boolean;
}

export const TYPE_A = 1;
export const TYPE_AAAA = 28;
export const RCODE = { noError: 0, formErr: 1, servFail: 2, nxDomain: 3, notImp: 4, refused: 5 } as const;

/** The one question of a standard query, or undefined for anything else (a response, several
 * questions, a name that is not plain labels, a message cut short). */
export function parseQuery(msg: Buffer): DnsQuestion | undefined {
  if (msg.length < 12 || msg.length > 4096) return undefined;
  const flags = msg.readUInt16BE(2);
  if (flags & 0x8000 || (flags >> 11) & 0xf || msg.readUInt16BE(4) !== 1) return undefined; // QR, opcode, QDCOUNT
  const labels: string[] = [];
  let at = 12;
  for (;;) {
    if (at >= msg.length) return undefined;
    const len = msg[at]!;
    if (len === 0) break;
    if (len > 63 || at + 1 + len > msg.length) return undefined; // compression pointers have no place in a question
    const label = msg.subarray(at + 1, at + 1 + len).toString("latin1");
    if (!/^[A-Za-z0-9_-]+$/.test(label)) return undefined;
    labels.push(label.toLowerCase());
    at += 1 + len;
  }
  if (at + 5 > msg.length) return undefined;
  const name = labels.join(".");
  if (name.length === 0 || name.length > 253) return undefined;
  return { id: msg.readUInt16BE(0), name, type: msg.readUInt16BE(at + 1), raw: msg.subarray(12, at + 5), rd: Boolean(flags & 0x0100) };
}

/** The TTL of every address the sandboxes' DNS answers (seconds): how long a sandbox may use an
 * answer, and so how long the kernel's fast path keeps a destination a name admitted. */
export const ANSWER_TTL_S = 30;

/** The answer to `q`: `addresses` of the question's type (A: IPv4, AAAA: IPv6; others are
 * skipped) with `ttl`, under `rcode`. */
export function buildAnswer(q: DnsQuestion, rcode: number, addresses: string[] = [], ttl = ANSWER_TTL_S): Buffer {
  const records: Buffer[] = [];
  for (const a of addresses) {
    const ip = parseIp(a);
    if (!ip || ip.v6 !== (q.type === TYPE_AAAA) || (q.type !== TYPE_A && q.type !== TYPE_AAAA)) continue;
    const rdata = addressBytes(ip);
    const head = Buffer.alloc(12);
    head.writeUInt16BE(0xc00c, 0); // the name: a pointer to the question's
    head.writeUInt16BE(q.type, 2);
    head.writeUInt16BE(1, 4); // IN
    head.writeUInt32BE(ttl, 6);
    head.writeUInt16BE(rdata.length, 10);
    records.push(head, rdata);
  }
  const header = Buffer.alloc(12);
  header.writeUInt16BE(q.id, 0);
  header.writeUInt16BE(0x8000 | (q.rd ? 0x0100 : 0) | 0x0080 | rcode, 2); // QR, RD echoed, RA
  header.writeUInt16BE(1, 4);
  header.writeUInt16BE(records.length / 2, 6);
  return Buffer.concat([header, q.raw, ...records]);
}

/** The answer to a message that is not a query this resolver takes: FORMERR with its id. */
export function formErr(msg: Buffer): Buffer | undefined {
  if (msg.length < 2) return undefined;
  const header = Buffer.alloc(12);
  header.writeUInt16BE(msg.readUInt16BE(0), 0);
  header.writeUInt16BE(0x8000 | RCODE.formErr, 2);
  return header;
}

/** An address's bytes in network order (4 or 16). */
function addressBytes(ip: Ip): Buffer {
  const out = Buffer.alloc(ip.v6 ? 16 : 4);
  for (let i = out.length - 1, n = ip.n; i >= 0; i--, n >>= 8n) out[i] = Number(n & 0xffn);
  return out;
}
