// The name a transparently redirected connection asks for, read from its first bytes: TLS's SNI
// (server_name in the ClientHello) or plain HTTP's Host. Pure; the proxy judges the name and
// still connects only to the address the connection was going to.

/** What the first bytes say: `undefined` while more bytes could still tell; `kind` once known,
 * with the name when the protocol carries one. */
export type Sniffed = { kind: "tls" | "http"; name?: string } | { kind: "other" } | undefined;

/** At most this many bytes are held while waiting for a name (a ClientHello or a request head). */
export const MAX_SNIFF = 16 * 1024;

const METHOD = /^[A-Z]{3,10} /;

export function sniff(buf: Buffer): Sniffed {
  if (buf.length === 0) return undefined;
  if (buf[0] === 0x16) return sniffTls(buf);
  const head = buf.subarray(0, 11).toString("latin1");
  if (!METHOD.test(head)) return /^[A-Z]{0,10}$/.test(head) && buf.length < 11 ? undefined : { kind: "other" };
  const end = buf.indexOf("\r\n\r\n");
  if (end < 0) return buf.length < MAX_SNIFF ? undefined : { kind: "http" };
  const host = /\r\nhost:[ \t]*([^\r\n]*)/i.exec(buf.subarray(0, end + 2).toString("latin1"))?.[1]?.trim();
  if (!host) return { kind: "http" };
  const bare = /^\[([^\]]+)\](?::\d+)?$/.exec(host)?.[1] ?? host.replace(/:\d+$/, "");
  return { kind: "http", name: bare.toLowerCase() };
}

/** A TLS record holding a ClientHello: its server_name, when it has one. */
function sniffTls(buf: Buffer): Sniffed {
  if (buf.length < 5) return buf.length < 2 || buf[1] === 3 ? undefined : { kind: "other" };
  if (buf[1] !== 3) return { kind: "other" };
  const recordEnd = 5 + buf.readUInt16BE(3);
  if (buf.length < recordEnd) return recordEnd <= MAX_SNIFF ? undefined : { kind: "tls" };
  const hello = buf.subarray(5, recordEnd);
  try {
    return { kind: "tls", ...(serverName(hello) ? { name: serverName(hello)! } : {}) };
  } catch {
    return { kind: "tls" };
  }
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
          return /^[a-z0-9.-]{1,253}$/i.test(name) ? name.toLowerCase() : undefined;
        }
        e += 3 + nameLen;
      }
      return undefined;
    }
    at += len;
  }
  return undefined;
}
