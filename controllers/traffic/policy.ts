// A sandbox's egress rules (E2B's `network.allowOut` / `denyOut`) and the decision for one
// destination. Pure: the proxy resolves names and hands the addresses in.
//
// E2B's semantics, as its API documents them:
// - allowOut entries are IP addresses, CIDR blocks or domain names (`example.com`, and
//   `*.example.com` for its subdomains); denyOut entries are IP addresses and CIDR blocks only.
// - An allowOut match always wins over a denyOut match; a destination neither list matches is
//   allowed (rules restrict only what they name). `0.0.0.0/0` (ALL_TRAFFIC) means every
//   destination: here IPv6 too, since a proxy that resolves names could otherwise be walked
//   around through an AAAA record or `[::1]`.
// - A domain allowed by name is allowed whatever its addresses are; a name not allowed by name is
//   judged by each address it resolves to, and only addresses that pass are connected to.
// Where this is stricter than the rules' letter, because the proxy runs on a host whose network
// an E2B sandbox does not see:
// - E2B sandboxes have no IPv6, so an IPv6 destination passes only when allowOut admits it (an
//   IPv6 CIDR, ALL_TRAFFIC, or a domain allowed by name); an IPv4 deny list cannot be walked
//   around through `[::1]` or an AAAA record. Forms that embed an IPv4 address (IPv4-mapped,
//   IPv4-compatible `::a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) are judged as that address;
//   those whose IPv4 address depends on a translator's setup (NAT64 local-use `64:ff9b:1::/48`,
//   SIIT `::ffff:0:0:0/96`, Teredo `2001::/32`) are never destinations.
// - `0.0.0.0/8` and `::` are never destinations: connect() takes them to the host's own loopback.
//   Nor is what the caller's `refuse` names (host-reach.ts: loopback, link-local, and in the agent
//   the host's own addresses and other sandboxes), since the proxy connects from the host.
// Where this differs from E2B: E2B can see a name only on ports 80 (Host) and 443 (SNI) and
// judges other ports by address alone; the proxy knows the name on every port, because it
// resolves it itself, so a domain rule applies on any port.
import type { EgressPolicy } from "../../schema/protocol/egress.ts";
import { cidrContains, cidrWithin, formatIp, parseCidr, parseIp, privateRange, type Ip } from "../../schema/egress/address.ts";
import { normalizeHost, parseRule, policyErrors, type Rule } from "../../schema/egress/rules.ts";
import type { Refuse } from "./host-reach.ts";

export interface CompiledPolicy {
  allow: Rule[];
  deny: Rule[];
  /** Whether a name's addresses can change a decision. False when no allowOut address entry
   * could admit an address and denyOut covers all of IPv4 (IPv6 passes only when allowOut admits
   * it): then a name not allowed by name is refused without being resolved, so a sandbox cannot
   * make the agent look up names of its choosing (a DNS channel out). */
  addressesMatter: boolean;
}

export type Verdict =
  | { allowed: true; addresses: string[]; rule?: string }
  | { allowed: false; reason: string };

const V4_ALL = (1n << 32n) - 1n;
const UNSPECIFIED_V4 = parseCidr("0.0.0.0/8")!;

/** Whether the IPv4 blocks in `rules` (with 0.0.0.0/8, never a destination) cover every address. */
function coversAllV4(rules: Rule[]): boolean {
  if (rules.some((r) => r.kind === "all")) return true;
  const spans: [bigint, bigint][] = [[0n, (1n << 24n) - 1n]];
  for (const r of rules) {
    if (r.kind !== "cidr" || r.cidr.v6) continue;
    const size = 1n << BigInt(32 - r.cidr.bits);
    spans.push([r.cidr.base * size, r.cidr.base * size + size - 1n]);
  }
  spans.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  let next = 0n;
  for (const [start, end] of spans) {
    if (start > next) return false;
    if (end + 1n > next) next = end + 1n;
  }
  return next > V4_ALL;
}

/** Compiles valid rules; throws with every problem otherwise. */
export function compilePolicy(p: EgressPolicy): CompiledPolicy {
  const errors = policyErrors(p);
  if (errors.length) throw new Error(`invalid egress rules: ${errors.join("; ")}`);
  const allow = p.allowOut.map((e) => parseRule(e, "allowOut") as Rule);
  const deny = p.denyOut.map((e) => parseRule(e, "denyOut") as Rule);
  return { allow, deny, addressesMatter: allow.some((r) => r.kind !== "domain") || !coversAllV4(deny) };
}

function matchesAddress(r: Rule, ip: Ip): boolean {
  if (r.kind === "all") return true;
  return r.kind === "cidr" && cidrContains(r.cidr, ip);
}

function matchesName(r: Rule, name: string): boolean {
  if (r.kind !== "domain") return false;
  return r.wildcard ? name.endsWith(`.${r.name}`) : name === r.name;
}

/** The IPv4 address an IPv6 address carries (IPv4-compatible, NAT64, 6to4), if it carries one. */
function embeddedV4(ip: Ip): Ip | undefined {
  if (!ip.v6) return undefined;
  const low = ip.n & V4_ALL;
  if (ip.n >> 32n === 0n && low > 1n) return { v6: false, n: low }; // ::a.b.c.d, not :: or ::1
  if (ip.n >> 32n === 0x64ff9bn << 64n) return { v6: false, n: low }; // 64:ff9b::/96
  if (ip.n >> 112n === 0x2002n) return { v6: false, n: (ip.n >> 80n) & V4_ALL }; // 2002:AABB:CCDD::/48
  return undefined;
}

/** IPv6 prefixes a translator on the path may carry to an IPv4 address whose place in the address
 * depends on the translator's setup: NAT64's local-use 64:ff9b:1::/48 (RFC 8215), SIIT's
 * IPv4-translated ::ffff:0:0:0/96 (RFC 2765), Teredo's 2001::/32 (RFC 4380). Their IPv4 address
 * cannot be judged, so they are never destinations. */
function translated(ip: Ip): string | undefined {
  if (!ip.v6) return undefined;
  if (ip.n >> 80n === 0x64ff9b0001n) return "NAT64 local-use 64:ff9b:1::/48";
  if (ip.n >> 32n === 0xffff0000n) return "SIIT IPv4-translated ::ffff:0:0:0/96";
  if (ip.n >> 96n === 0x20010000n) return "Teredo 2001::/32";
  return undefined;
}

const isUnspecified = (ip: Ip) => (ip.v6 ? ip.n === 0n : cidrContains(UNSPECIFIED_V4, ip));
/** 0.0.0.0/8 and :: in any form: connect() takes them to the host's own loopback. */
const neverDestination = (ip: Ip) => isUnspecified(ip) || isUnspecified(embeddedV4(ip) ?? ip);

/** Whether the decision for `host` needs its addresses; when false, `decide` refuses it as is and
 * the caller must not resolve it. */
export function needsAddresses(policy: CompiledPolicy, host: string): boolean {
  const name = normalizeHost(host);
  if (parseIp(name)) return false;
  return policy.addressesMatter || policy.allow.some((r) => matchesName(r, name));
}

/** Why an address may never be connected to, whatever the rules say: 0.0.0.0/8 and ::, and what
 * `refuse` names (the proxy's own reach, host-reach.ts), in the address's own form and the IPv4
 * form it carries. */
export function never(ip: Ip, shown: string, refuse: Refuse | undefined): string | undefined {
  if (neverDestination(ip)) return `${shown} is not a destination (0.0.0.0/8 and :: reach this host's own loopback)`;
  const via = translated(ip);
  if (via) return `${shown} is not a destination: ${via} may carry it to any IPv4 address, which cannot be judged`;
  if (!refuse) return undefined;
  const v4 = embeddedV4(ip);
  const why = refuse(ip) ?? (v4 && refuse(v4));
  return why && `${shown} ${why}`;
}

/** For an address in a private range (schema/egress/address.ts: the host's LAN and VPC
 * neighbours): the allowOut entry that opens it, an address or block inside that range, or why it
 * is refused. Broader entries (`0.0.0.0/0`, a domain allowed by name) do not open private ranges:
 * they were meant for the internet, not for what happens to sit next to the host. Undefined for an
 * address in no private range. */
function privateVerdict(policy: CompiledPolicy, ip: Ip, shown: string): { denied: string } | { rule: string } | undefined {
  const forms = [ip, embeddedV4(ip)].filter((f): f is Ip => f !== undefined);
  for (const f of forms) {
    const range = privateRange(f);
    if (!range) continue;
    const open = policy.allow.find((r) => r.kind === "cidr" && cidrWithin(r.cidr, range.cidr) && cidrContains(r.cidr, f));
    if (open) return { rule: open.text };
    return { denied: `${shown} is in the private range ${range.text}, reached only when allowOut names an address or block inside it` };
  }
  return undefined;
}

/** The verdict of the rules on one address that is not `never` refused: why it may not be
 * connected to, or the allowOut entry that admitted it (none when no rule names it). */
function judge(policy: CompiledPolicy, ip: Ip, shown: string): { denied: string } | { rule?: string } {
  const v4 = embeddedV4(ip);
  const forms = v4 ? [ip, v4] : [ip];
  const allow = policy.allow.find((r) => forms.some((f) => matchesAddress(r, f)));
  if (allow) return { rule: allow.text };
  if (ip.v6 && !v4) return { denied: `${shown} is IPv6, which passes only when allowOut admits it (E2B sandboxes have no IPv6)` };
  const deny = policy.deny.find((r) => forms.some((f) => matchesAddress(r, f)));
  return deny ? { denied: `${shown} is denied by denyOut ${JSON.stringify(deny.text)}` } : {};
}

/** The decision for `host` (a name or an IP literal) given the addresses it resolved to (ignored
 * for an IP literal, and not needed when `needsAddresses` says so). An allowed verdict lists the
 * addresses that passed, in resolution order, for the caller to connect to (and no other); `rule`
 * is the allowOut entry that let the first one pass, if one did. `refuse` names addresses no rule
 * can open (the proxy's host, host-reach.ts). */
export function decide(policy: CompiledPolicy, host: string, resolved: string[], refuse?: Refuse): Verdict {
  const name = normalizeHost(host);
  const literal = parseIp(name);
  const byName = literal ? undefined : policy.allow.find((r) => matchesName(r, name));
  if (!literal && !byName && !policy.addressesMatter) {
    return { allowed: false, reason: `${name} is not allowed by name, and denyOut covers every address (not resolved)` };
  }
  const candidates = literal ? [literal] : resolved.map((a) => parseIp(a)).filter((ip): ip is Ip => ip !== undefined);
  if (candidates.length === 0) return { allowed: false, reason: `${name} did not resolve to any address` };
  const passed: { ip: Ip; rule?: string }[] = [];
  let denial = "";
  for (const ip of candidates) {
    const shown = literal ? name : `${name} (${formatIp(ip)})`;
    // A name allowed by name passes at any address but the ones that are never destinations.
    const refused = never(ip, shown, refuse);
    const j = refused ? { denied: refused } : (privateVerdict(policy, ip, shown) ?? (byName ? { rule: byName.text } : judge(policy, ip, shown)));
    if (!("denied" in j)) passed.push({ ip, rule: j.rule });
    else denial ||= j.denied;
  }
  if (passed.length === 0) return { allowed: false, reason: denial };
  const first = passed[0]!;
  return { allowed: true, addresses: passed.map((p) => formatIp(p.ip)), ...(first.rule ? { rule: first.rule } : {}) };
}
