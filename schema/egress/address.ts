// IP addresses and CIDR blocks as numbers, for the egress policy. Pure (no Node modules), so the
// same parsing can run anywhere the policy is checked.

/** An address: IPv4 in the low 32 bits, or a full 128-bit IPv6 address. */
export interface Ip {
  v6: boolean;
  n: bigint;
}

/** A block of addresses: every address whose first `bits` bits equal those of `base`. */
export interface Cidr {
  v6: boolean;
  base: bigint;
  bits: number;
}

const V4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;

function parseV4(text: string): bigint | undefined {
  const m = V4.exec(text);
  if (!m) return undefined;
  let n = 0n;
  for (const part of m.slice(1)) {
    // Leading zeros are octal to some parsers and decimal to others: refuse them.
    if (part.length > 1 && part.startsWith("0")) return undefined;
    const v = Number(part);
    if (v > 255) return undefined;
    n = (n << 8n) | BigInt(v);
  }
  return n;
}

function parseV6(text: string): bigint | undefined {
  const zone = text.indexOf("%");
  if (zone >= 0) text = text.slice(0, zone);
  // An embedded IPv4 tail (::ffff:1.2.3.4) is two groups written another way.
  const lastColon = text.lastIndexOf(":");
  if (text.includes(".", lastColon)) {
    const v4 = parseV4(text.slice(lastColon + 1));
    if (v4 === undefined) return undefined;
    text = `${text.slice(0, lastColon + 1)}${(v4 >> 16n).toString(16)}:${(v4 & 0xffffn).toString(16)}`;
  }
  const halves = text.split("::");
  if (halves.length > 2) return undefined;
  const groups = (s: string) => (s === "" ? [] : s.split(":"));
  const head = groups(halves[0]!);
  const rest = halves.length === 2 ? groups(halves[1]!) : [];
  const parsed: bigint[] = [];
  for (const g of [...head, ...rest]) {
    if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return undefined;
    parsed.push(BigInt(parseInt(g, 16)));
  }
  const total = parsed.length;
  if (halves.length === 1 ? total !== 8 : total > 7) return undefined;
  const zeros: bigint[] = Array(8 - total).fill(0n);
  const all = [...parsed.slice(0, head.length), ...(halves.length === 2 ? zeros : []), ...parsed.slice(head.length)];
  return all.reduce((n, g) => (n << 16n) | g, 0n);
}

const MAPPED_PREFIX = 0xffffn << 32n;

/** Parses an IP address (IPv6 optionally in brackets). IPv4-mapped IPv6 (`::ffff:a.b.c.d`) comes
 * back as the IPv4 address it names, so a rule on one form covers the other. */
export function parseIp(text: string): Ip | undefined {
  const t = text.startsWith("[") && text.endsWith("]") ? text.slice(1, -1) : text;
  const v4 = parseV4(t);
  if (v4 !== undefined) return { v6: false, n: v4 };
  if (!t.includes(":")) return undefined;
  const v6 = parseV6(t);
  if (v6 === undefined) return undefined;
  if (v6 >> 32n === MAPPED_PREFIX >> 32n) return { v6: false, n: v6 & 0xffffffffn };
  return { v6: true, n: v6 };
}

/** Parses `a.b.c.d/n`, `x::/n` or a bare address (a block of one). */
export function parseCidr(text: string): Cidr | undefined {
  const slash = text.indexOf("/");
  const ip = parseIp(slash < 0 ? text : text.slice(0, slash));
  if (!ip) return undefined;
  const width = ip.v6 ? 128 : 32;
  if (slash < 0) return { v6: ip.v6, base: ip.n, bits: width };
  const bitsText = text.slice(slash + 1);
  if (!/^\d{1,3}$/.test(bitsText)) return undefined;
  const bits = Number(bitsText);
  if (bits > width) return undefined;
  return { v6: ip.v6, base: ip.n >> BigInt(width - bits), bits };
}

export function cidrContains(c: Cidr, ip: Ip): boolean {
  if (c.v6 !== ip.v6) return false;
  const width = ip.v6 ? 128 : 32;
  return ip.n >> BigInt(width - c.bits) === c.base;
}

/** The address as text (IPv6 without compression), for connecting and for messages. */
export function formatIp(ip: Ip): string {
  if (!ip.v6) return [24n, 16n, 8n, 0n].map((s) => String((ip.n >> s) & 0xffn)).join(".");
  const groups: string[] = [];
  for (let s = 112n; s >= 0n; s -= 16n) groups.push(((ip.n >> s) & 0xffffn).toString(16));
  return groups.join(":");
}

/** Private and shared address space (RFC 1918, RFC 6598 carrier-grade NAT, RFC 4193 unique local
 * IPv6): the host's LAN and cloud VPC neighbours, which a sandbox reaches only when its allowOut
 * names an address or block inside one of them (the nftables table of the local driver drops
 * them for sandboxes without rules; the traffic-proxy refuses them otherwise). */
export const PRIVATE_RANGES = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7"] as const;

const PRIVATE_BLOCKS = PRIVATE_RANGES.map((r) => [r, parseCidr(r)!] as const);

/** The private range `ip` is in, as its block and its text, if any. */
export function privateRange(ip: Ip): { text: string; cidr: Cidr } | undefined {
  const hit = PRIVATE_BLOCKS.find(([, c]) => cidrContains(c, ip));
  return hit && { text: hit[0], cidr: hit[1] };
}

/** Whether every address of `inner` is in `outer`. */
export function cidrWithin(inner: Cidr, outer: Cidr): boolean {
  if (inner.v6 !== outer.v6 || inner.bits < outer.bits) return false;
  return inner.base >> BigInt(inner.bits - outer.bits) === outer.base;
}
