// TrafficPolicy and GlobalTrafficPolicy (L3/L4 egress) for one sandbox and one destination. Pure:
// the caller hands in the policies, the sandbox's labels and what it knows of the destination
// (its address, the names it goes by, port and protocol).
//
// Semantics (OpenKruise Agents' TrafficPolicy, ../../../shared/reference/openkruise-agents.md §1.7,
// §6.1), with one difference asked of this platform:
// - A policy selects a sandbox by its labels (empty selector: every sandbox in scope); a global
//   one by the platform's labels only (selectsSandbox: the tenant chooses its own labels).
// - Rules are tried in order: team policies (TrafficPolicy) by priority ascending (lower first),
//   then global ones (GlobalTrafficPolicy) by priority, so a cluster-wide policy lies beneath a
//   team's (OpenKruise merges both into one order; here scope comes first). Within a policy, its
//   own order. Ties keep the order given (by name, from the caller).
// - The first rule whose `to` and `ports` both match decides (`allow` or `reject`). A rule without
//   `to` is skipped (as OpenKruise's compiler does); `cidr: 0.0.0.0/0` means everything.
// - A sandbox some policy selects rejects what no rule matched (closed by default); one that no
//   policy selects is not governed here (`undefined`).
// - `fqdn` peers: exact names, or `*.example.com` for its subdomains (not the apex), against the
//   destination's names (the SNI/Host it asked for, or the names its DNS was answered this address
//   for); never by address alone.
// - Ports: none = every port; `protocol` without `port` = every port of that protocol; `endPort`
//   makes a range. Protocol defaults to TCP when a port is given.
import { cidrContains, parseCidr, parseIp } from "../../schema/egress/address.ts";
import { selects, selectsSandbox, type LabelSelector } from "../../schema/api/traffic-policy.ts";

export { selects, type LabelSelector };

export type L4Protocol = "TCP" | "UDP" | "ICMP" | "SCTP";
export interface L4Peer {
  cidr?: string;
  fqdn?: string;
}
export interface L4Port {
  protocol?: L4Protocol;
  port?: number;
  endPort?: number;
}
export interface L4Rule {
  action: "allow" | "reject";
  to?: L4Peer[];
  ports?: L4Port[];
}
export interface L4Policy {
  /** "namespace/name" for a TrafficPolicy, "name" for a global one: how a verdict names it. */
  name: string;
  global: boolean;
  priority?: number;
  selector?: LabelSelector;
  egress?: { rules?: L4Rule[] };
}
export interface L4Destination {
  ip: string;
  names: string[];
  port: number;
  protocol: L4Protocol;
}
export interface L4Verdict {
  allowed: boolean;
  /** Which rule decided, e.g. `TrafficPolicy team-a/web rule 2 (reject)`, or the default. */
  by: string;
}

/** The policies that select a sandbox with `labels`, in the order their rules are tried. */
export function applicable(policies: L4Policy[], labels: Record<string, string>): L4Policy[] {
  const order = (p: L4Policy) => [p.global ? 1 : 0, p.priority ?? 1000] as const;
  return policies
    .filter((p) => selectsSandbox(p.selector, labels, p.global))
    .map((p, i) => ({ p, i }))
    .sort((a, b) => order(a.p)[0] - order(b.p)[0] || order(a.p)[1] - order(b.p)[1] || a.i - b.i)
    .map(({ p }) => p);
}

function nameMatches(pattern: string, name: string): boolean {
  const p = pattern.toLowerCase().replace(/\.$/, "");
  return p.startsWith("*.") ? name.endsWith(p.slice(1)) : name === p;
}

function peerMatches(peer: L4Peer, d: L4Destination): boolean {
  if (peer.cidr !== undefined) {
    const c = parseCidr(peer.cidr.includes("/") ? peer.cidr : `${peer.cidr}/${peer.cidr.includes(":") ? 128 : 32}`);
    const ip = parseIp(d.ip);
    return Boolean(c && ip && cidrContains(c, ip));
  }
  return peer.fqdn !== undefined && d.names.some((n) => nameMatches(peer.fqdn!, n.toLowerCase()));
}

function portMatches(p: L4Port, d: L4Destination): boolean {
  if ((p.protocol ?? "TCP") !== d.protocol) return false;
  if (p.port === undefined) return true;
  return d.port >= p.port && d.port <= (p.endPort ?? p.port);
}

/** The verdict for `d` from `sandbox`'s point of view, or undefined when no policy selects it. */
export function decideL4(policies: L4Policy[], labels: Record<string, string>, d: L4Destination): L4Verdict | undefined {
  const chosen = applicable(policies, labels);
  if (chosen.length === 0) return undefined;
  for (const p of chosen) {
    const rules = p.egress?.rules ?? [];
    for (let i = 0; i < rules.length; i++) {
      const r = rules[i]!;
      if (!r.to?.length) continue;
      if (!r.to.some((peer) => peerMatches(peer, d))) continue;
      if (r.ports?.length && !r.ports.some((port) => portMatches(port, d))) continue;
      return { allowed: r.action === "allow", by: `${p.global ? "GlobalTrafficPolicy" : "TrafficPolicy"} ${p.name} rule ${i + 1} (${r.action})` };
    }
  }
  return { allowed: false, by: `no rule matched (${chosen.map((p) => p.name).join(", ")} select this sandbox: closed by default)` };
}

/** E2B's `allowOut`/`denyOut` as one policy of this engine (OpenKruise's compiler, §3.5: a
 * per-sandbox policy at priority 100): allowOut entries first (an allow always wins), then
 * denyOut, then everything else allowed. What the proxy adds beyond the rules' letter (private
 * ranges, the host's own addresses, IPv6 only when allowed) stays in policy.ts. */
export function e2bPolicy(name: string, rules: { allowOut: string[]; denyOut: string[] }): L4Policy {
  const peer = (e: string): L4Peer => (parseIp(e) || e.includes("/") ? { cidr: e } : { fqdn: e });
  const any = { to: [{ cidr: "0.0.0.0/0" }, { cidr: "::/0" }] };
  return {
    name,
    global: false,
    priority: 100,
    egress: {
      rules: [
        ...rules.allowOut.map((e) => ({ action: "allow" as const, to: e === "0.0.0.0/0" ? any.to : [peer(e)] })),
        ...rules.denyOut.map((e) => ({ action: "reject" as const, to: e === "0.0.0.0/0" ? any.to : [peer(e)] })),
        { action: "allow" as const, ...any },
      ],
    },
  };
}
