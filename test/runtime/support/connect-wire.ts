// Raw Connect-protocol calls, to assert the bytes the SDK depends on (envelopes, end-stream,
// keepalives, error bodies) rather than what a client library makes of them.

export interface Envelope {
  flags: number;
  json: any;
}

export function envelope(message: unknown): Buffer {
  const body = Buffer.from(JSON.stringify(message));
  const head = Buffer.alloc(5);
  head.writeUInt8(0, 0);
  head.writeUInt32BE(body.length, 1);
  return Buffer.concat([head, body]);
}

export function parseEnvelopes(buf: Buffer): Envelope[] {
  const out: Envelope[] = [];
  let i = 0;
  while (i + 5 <= buf.length) {
    const flags = buf.readUInt8(i);
    const len = buf.readUInt32BE(i + 1);
    out.push({ flags, json: JSON.parse(buf.subarray(i + 5, i + 5 + len).toString()) });
    i += 5 + len;
  }
  if (i !== buf.length) throw new Error(`trailing ${buf.length - i} bytes after the last envelope`);
  return out;
}

export async function streamCall(base: string, method: string, message: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${base}/${method}`, {
    method: "POST",
    headers: { "content-type": "application/connect+json", "connect-protocol-version": "1", ...headers },
    body: new Uint8Array(envelope(message)),
  });
  return { status: res.status, contentType: res.headers.get("content-type"), envelopes: parseEnvelopes(Buffer.from(await res.arrayBuffer())) };
}

export async function unaryCall(base: string, method: string, message: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${base}/${method}`, {
    method: "POST",
    headers: { "content-type": "application/json", "connect-protocol-version": "1", ...headers },
    body: JSON.stringify(message),
  });
  return { status: res.status, json: await res.json() };
}
