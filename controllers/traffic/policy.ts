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
// Where this differs from E2B: E2B can see a name only on ports 80 (Host) and 443 (SNI) and
// judges other ports by address alone; the proxy knows the name on every port, because it
// resolves it itself, so a domain rule applies on any port.
import type { EgressPolicy } from "../../schema/protocol/egress.ts";
import { cidrContains, formatIp, parseIp, type Ip } from "../../schema/egress/address.ts";
import { normalizeHost, parseRule, policyErrors, type Rule } from "../../schema/egress/rules.ts";

export interface CompiledPolicy {
  allow: Rule[];
  deny: Rule[];
}

export type Verdict =
  | { allowed: true; addresses: string[]; rule?: string }
  | { allowed: false; reason: string };

/** Compiles valid rules; throws with every problem otherwise. */
export function compilePolicy(p: EgressPolicy): CompiledPolicy {
  const errors = policyErrors(p);
  if (errors.length) throw new Error(`invalid egress rules: ${errors.join("; ")}`);
  return {
    allow: p.allowOut.map((e) => parseRule(e, "allowOut") as Rule),
    deny: p.denyOut.map((e) => parseRule(e, "denyOut") as Rule),
  };
}

function matchesAddress(r: Rule, ip: Ip): boolean {
  if (r.kind === "all") return true;
  return r.kind === "cidr" && cidrContains(r.cidr, ip);
}

function matchesName(r: Rule, name: string): boolean {
  if (r.kind !== "domain") return false;
  return r.wildcard ? name.endsWith(`.${r.name}`) : name === r.name;
}

/** The decision for `host` (a name or an IP literal) given the addresses it resolved to (ignored
 * for an IP literal). An allowed verdict lists the addresses that passed, in resolution order,
 * for the caller to connect to (and no other); `rule` is the allowOut entry that let the first
 * one pass, if one did. */
export function decide(policy: CompiledPolicy, host: string, resolved: string[]): Verdict {
  const name = normalizeHost(host);
  const literal = parseIp(name);
  const candidates = literal ? [literal] : resolved.map((a) => parseIp(a)).filter((ip): ip is Ip => ip !== undefined);
  if (candidates.length === 0) return { allowed: false, reason: `${name} did not resolve to any address` };
  if (!literal) {
    const byName = policy.allow.find((r) => matchesName(r, name));
    if (byName) return { allowed: true, addresses: candidates.map(formatIp), rule: byName.text };
  }
  const passed: { ip: Ip; rule?: string }[] = [];
  let denial = "";
  for (const ip of candidates) {
    const allow = policy.allow.find((r) => matchesAddress(r, ip));
    const deny = allow ? undefined : policy.deny.find((r) => matchesAddress(r, ip));
    if (!deny) passed.push({ ip, rule: allow?.text });
    else denial ||= `${literal ? name : `${name} (${formatIp(ip)})`} is denied by denyOut ${JSON.stringify(deny.text)}`;
  }
  if (passed.length === 0) return { allowed: false, reason: denial };
  const first = passed[0]!;
  return { allowed: true, addresses: passed.map((p) => formatIp(p.ip)), ...(first.rule ? { rule: first.rule } : {}) };
}
