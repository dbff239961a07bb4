// TrafficPolicy / GlobalTrafficPolicy in force on an agent: the set the edge sent
// (schema/api/traffic-policy.ts), which sandboxes each selects, and the decision for one
// destination of a governed sandbox (l4.ts), with E2B's allowOut/denyOut compiled into the same
// engine as one more team policy (priority 100, `e2bPolicy`).
//
// A sandbox some policy selects is governed here: every connection and DNS name of it is decided
// by the engine, first match wins, closed by default. Beneath the rules, whatever they say, the
// proxy's floor holds (host-reach.ts: the host's own addresses, loopback, link-local, other
// sandboxes; 0.0.0.0/8 and ::), because the proxy connects from the host. One that no policy
// selects keeps E2B's rules alone (policy.ts).
import type { TrafficPolicyEntry } from "../../schema/api/traffic-policy.ts";
import type { EgressPolicy } from "../../schema/protocol/egress.ts";
import { parseIp } from "../../schema/egress/address.ts";
import type { Refuse } from "./host-reach.ts";
import { applicable, decideL4, e2bPolicy, type L4Policy, type L4Protocol } from "./l4.ts";
import { never } from "./policy.ts";

/** What decides for one governed sandbox. */
export interface Governance {
  policies: L4Policy[];
  labels: Record<string, string>;
}

export interface GovernedVerdict {
  allowed: boolean;
  /** The deciding rule (`TrafficPolicy team/name rule 2 (reject)`), or why the floor refused. */
  by: string;
  /** Which kind of thing decided, for bounded metric labels. */
  source: "TrafficPolicy" | "GlobalTrafficPolicy" | "e2b" | "default" | "floor";
}

/** The name E2B's own rules go by in verdicts. */
export const E2B_POLICY = "network (E2B allowOut/denyOut)";

export function toL4(e: TrafficPolicyEntry): L4Policy {
  return { name: e.team ? `${e.team}/${e.name}` : e.name, global: e.team === null, priority: e.spec.priority, selector: e.spec.selector, egress: e.spec.egress };
}

export class TrafficPolicySet {
  #entries: TrafficPolicyEntry[] = [];
  #l4: { team: string | null; policy: L4Policy }[] = [];
  /** Called after every change (the proxy re-judges open connections). */
  onChange: () => void = () => {};

  replace(entries: TrafficPolicyEntry[]): void {
    // Ties in priority keep this order: by scope, then name.
    this.#entries = [...entries].sort((a, b) => (a.team ?? "").localeCompare(b.team ?? "") || a.name.localeCompare(b.name));
    this.#l4 = this.#entries.map((e) => ({ team: e.team, policy: toL4(e) }));
    this.onChange();
  }

  get entries(): readonly TrafficPolicyEntry[] {
    return this.#entries;
  }

  /** The policies deciding for a sandbox of `team` with `labels`, or undefined when none selects it. */
  governing(team: string | null, labels: Record<string, string>, e2b: EgressPolicy | null): Governance | undefined {
    const mine = this.#l4.filter((p) => p.team === null || p.team === team).map((p) => p.policy);
    if (applicable(mine, labels).length === 0) return undefined;
    return { policies: e2b ? [e2bPolicy(E2B_POLICY, e2b), ...mine] : mine, labels };
  }

  /** The ids of the sandboxes a policy selects (its status). */
  selectedBy(team: string | null, name: string, sandboxes: { id: string; team: string | null; labels: Record<string, string> }[]): string[] {
    const p = this.#l4.find((x) => x.team === team && x.policy.name === (team ? `${team}/${name}` : name));
    if (!p) return [];
    return sandboxes.filter((s) => (team === null || s.team === team) && applicable([p.policy], s.labels).length > 0).map((s) => s.id);
  }
}

/** The verdict for a connection to ip:port of a governed sandbox; `names`: what the destination
 * goes by (the name its bytes asked for when it resolves there, the names DNS answered). */
export function decideGoverned(g: Governance, d: { ip: string; port: number; names: string[]; protocol?: L4Protocol }, refuse: Refuse): GovernedVerdict {
  const ip = parseIp(d.ip);
  const floor = ip ? never(ip, d.ip, refuse) : `${d.ip} is not an address`;
  if (floor) return { allowed: false, by: floor, source: "floor" };
  const v = decideL4(g.policies, g.labels, { ip: d.ip, names: d.names, port: d.port, protocol: d.protocol ?? "TCP" })!;
  const source = v.by.includes(E2B_POLICY) ? "e2b" : v.by.startsWith("GlobalTrafficPolicy") ? "GlobalTrafficPolicy" : v.by.startsWith("TrafficPolicy") ? "TrafficPolicy" : "default";
  return { allowed: v.allowed, by: v.by, source };
}

/** Ports at which the verdict for a destination can change (every rule's range bounds and their
 * neighbours): a name is answered by DNS when some port of it is allowed, which is exact because
 * a verdict is constant between these. */
function candidatePorts(g: Governance): number[] {
  const out = new Set([1, 65535]);
  for (const p of g.policies) for (const r of p.egress?.rules ?? []) for (const port of r.ports ?? []) {
    if (port.port === undefined) continue;
    for (const n of [port.port - 1, port.port, port.endPort ?? port.port, (port.endPort ?? port.port) + 1]) if (n >= 1 && n <= 65535) out.add(n);
  }
  return [...out];
}

/** The addresses of `name` DNS may answer a governed sandbox: those some port of which a rule
 * allows (by the name or the address). `denied`: why none is. */
export function admitName(g: Governance, name: string, addresses: string[], refuse: Refuse): { addresses: string[] } | { denied: string } {
  const ports = candidatePorts(g);
  let why = `${name} did not resolve to any address`;
  const passed = addresses.filter((ip) => {
    for (const port of ports) {
      const v = decideGoverned(g, { ip, port, names: [name] }, refuse);
      if (v.allowed) return true;
      why = `${name} (${ip}): ${v.by}`;
    }
    return false;
  });
  return passed.length ? { addresses: passed } : { denied: why };
}
