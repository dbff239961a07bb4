// The grammar of E2B egress rules (`network.allowOut` / `denyOut`): which entries are IPs, CIDR
// blocks or domains, and why one is not. Pure, so the edge refuses bad rules at create with the
// same words the traffic-proxy would use. Matching lives with the proxy
// (controllers/traffic/policy.ts).
import type { EgressPolicy } from "../protocol/egress.ts";
import { parseCidr, type Cidr } from "./address.ts";

export type Rule =
  | { kind: "all"; text: string }
  | { kind: "cidr"; cidr: Cidr; text: string }
  | { kind: "domain"; name: string; wildcard: boolean; text: string };

const LABEL = /^(?!-)[a-z0-9_-]{1,63}(?<!-)$/;

/** Lower-case, without a trailing dot or IPv6 brackets. */
export function normalizeHost(host: string): string {
  let h = host.trim().toLowerCase();
  if (h.startsWith("[") && h.endsWith("]")) h = h.slice(1, -1);
  return h.endsWith(".") ? h.slice(0, -1) : h;
}

function isDomain(name: string): boolean {
  return name.length <= 253 && name.split(".").every((l) => LABEL.test(l));
}

/** One rule from its text, or the reason it is not one. */
export function parseRule(text: string, list: "allowOut" | "denyOut"): Rule | string {
  const t = text.trim();
  if (t === "0.0.0.0/0") return { kind: "all", text: t };
  const cidr = parseCidr(t);
  if (cidr) return { kind: "cidr", cidr, text: t };
  if (/^[\d./:[\]a-fA-F]+$/.test(t) && (t.includes("/") || /^[\d.]+$/.test(t) || t.includes(":"))) {
    return `${list}: ${JSON.stringify(text)} is not a valid IP address or CIDR block`;
  }
  const name = normalizeHost(t);
  const wildcard = name.startsWith("*.");
  const base = wildcard ? name.slice(2) : name;
  if (!isDomain(base)) return `${list}: ${JSON.stringify(text)} is not an IP address, a CIDR block or a domain name`;
  if (list === "denyOut") return `denyOut: ${JSON.stringify(text)} is a domain; denyOut takes IP addresses and CIDR blocks only`;
  return { kind: "domain", name: base, wildcard, text: t };
}

/** Every problem with the rules (empty when they are valid), for a clear refusal. */
export function policyErrors(p: EgressPolicy): string[] {
  const errors: string[] = [];
  for (const [list, entries] of [["allowOut", p.allowOut], ["denyOut", p.denyOut]] as const) {
    for (const e of entries) {
      const r = parseRule(e, list);
      if (typeof r === "string") errors.push(r);
    }
  }
  return errors;
}
