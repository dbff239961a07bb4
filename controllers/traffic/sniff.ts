// The name a transparently redirected connection asks for, read from its first bytes: TLS's SNI
// (server_name in the ClientHello) or plain HTTP's Host. Pure; the proxy judges the name and
// still connects only to the address the connection was going to.
import { normalizeHost } from "../../schema/egress/rules.ts";

/** What the first bytes say: `undefined` while more bytes could still tell; `kind` once known,
 * with the name when the protocol carries one. */
export type Sniffed = { kind: "tls" | "http"; name?: string } | { kind: "other" } | undefined;

/** At most this many bytes are held while waiting for a name (a ClientHello or a request head). */
export const MAX_SNIFF = 16 * 1024;

const METHOD = /^[A-Z]{3,10} /;

export function sniff(buf: Buffer): Sniffed {
  if (buf.length === 0) return undefined;
  if (buf[0] === 0x16) return sniffTls(buf);
  // HTTP servers skip empty lines before a request line (RFC 9112 2.2), so the sniffer does too.
  let lead = 0;
  while (lead < buf.length && (buf[lead] === 0x0d || buf[lead] === 0x0a)) lead++;
  if (lead > 0) return lead === buf.length ? (buf.length < MAX_SNIFF ? undefined : { kind: "other" }) : sniffHttp(buf.subarray(lead), buf.length);
  return sniffHttp(buf, buf.length);
}

/** What the first bytes say when no more will come or be waited for (the client's end, the
 * first-request timeout, MAX_SNIFF): a TLS or HTTP start cut short is that protocol without a name,
 * never "other" (which would pass the connection through unread). */
export function sniffFinal(buf: Buffer): Sniffed {
  const s = sniff(buf);
  if (s || buf.length === 0) return s;
  return buf[0] === 0x16 ? { kind: "tls" } : { kind: "http" };
}

/** A request head (after any empty lines); `total` counts those too against MAX_SNIFF. */
function sniffHttp(buf: Buffer, total: number): Sniffed {
  const head = buf.subarray(0, 11).toString("latin1");
  if (!METHOD.test(head)) return /^[A-Z]{0,10}$/.test(head) && buf.length < 11 ? undefined : { kind: "other" };
  const end = buf.indexOf("\r\n\r\n");
  if (end < 0) return total < MAX_SNIFF ? undefined : { kind: "http" };
  const host = bareHost(/\r\nhost:[ \t]*([^\r\n]*)/i.exec(buf.subarray(0, end + 2).toString("latin1"))?.[1]);
  return host ? { kind: "http", name: host } : { kind: "http" };
}

/** A Host header's name: without its port, brackets dropped, as the rules match names
 * (`normalizeHost`: lower case, no trailing dot, `API.test.` is `api.test`); "" when absent. The
 * SNI is made so too where it is read (`serverName`), and the DNS names a sandbox asks for
 * already are (dns-wire.ts), so the three compare equal. */
export function bareHost(value: string | undefined): string {
  const h = (value ?? "").trim();
  return normalizeHost(/^\[([^\]]+)\](?::\d*)?$/.exec(h)?.[1] ?? h.replace(/:\d*$/, ""));
}

/** A ClientHello may span this many handshake records at most (RFC 8446 5.1 lets a client
 * fragment it; servers reassemble it, so the sniffer does too, within MAX_SNIFF bytes). */
const MAX_HELLO_RECORDS = 16;

/** TLS handshake records holding a ClientHello, reassembled: its server_name, when it has one.
 * A hello that cannot be read whole (too many records, too large, another record type first,
 * malformed) is `tls` with no name: the proxy then judges it as a connection without SNI. */
function sniffTls(buf: Buffer): Sniffed {
  const parts: Buffer[] = [];
  let have = 0;
  let at = 0;
  for (let records = 0; ; records++) {
    if (buf.length < at + 5) return buf.length < at + 2 || buf[at + 1] === 3 ? more(buf) : at === 0 ? { kind: "other" } : { kind: "tls" };
    if (buf[at + 1] !== 3) return at === 0 ? { kind: "other" } : { kind: "tls" };
    if (buf[at] !== 0x16 || records >= MAX_HELLO_RECORDS) return { kind: "tls" };
    const end = at + 5 + buf.readUInt16BE(at + 3);
    if (buf.length < end) return end <= MAX_SNIFF ? undefined : { kind: "tls" };
    parts.push(buf.subarray(at + 5, end));
    have += end - at - 5;
    at = end;
    if (have < 4) continue;
    const hello = parts.length === 1 ? parts[0]! : Buffer.concat(parts, have); // one record: the common case, no copy
    const whole = 4 + hello.readUIntBE(1, 3);
    if (have < whole) {
      if (whole > MAX_SNIFF) return { kind: "tls" };
      continue;
    }
    try {
      const name = serverName(hello.subarray(0, whole));
      return { kind: "tls", ...(name ? { name } : {}) };
    } catch {
      return { kind: "tls" };
    }
  }
}

/** Not known yet, unless the sniffer holds all it may: a TLS start that never finished is `tls`. */
function more(buf: Buffer): Sniffed {
  return buf.length < MAX_SNIFF ? undefined : { kind: "tls" };
}

/** The host_name of the server_name extension of a ClientHello handshake message; throws
 * (RangeError) on a message cut short. */
function serverName(h: Buffer): string | undefined {
  if (h[0] !== 1) return undefined; // not a ClientHello
  let at = 4 + 2 + 32; // type, length; version; random
  at += 1 + h.readUInt8(at); // session id
  at += 2 + h.readUInt16BE(at); // cipher suites
  at += 1 + h.readUInt8(at); // compression methods
  const extEnd = Math.min(h.length, at + 2 + h.readUInt16BE(at));
  at += 2;
  while (at + 4 <= extEnd) {
    const type = h.readUInt16BE(at);
    const len = h.readUInt16BE(at + 2);
    at += 4;
    if (type === 0) {
      // server_name_list: length, then entries of type (0 = host_name), length, name
      let e = at + 2;
      while (e + 3 <= at + len) {
        const nameLen = h.readUInt16BE(e + 1);
        if (h[e] === 0) {
          const name = h.subarray(e + 3, e + 3 + nameLen).toString("latin1");
          // Labels of letters, digits and hyphens, with one trailing dot at most; else no name.
          return /^[a-z0-9-]{1,63}(\.[a-z0-9-]{1,63})*\.?$/i.test(name) && name.length <= 254 ? normalizeHost(name) : undefined;
        }
        e += 3 + nameLen;
      }
      return undefined;
    }
    at += len;
  }
  return undefined;
}
