// Which SecurityProfile / GlobalSecurityProfile objects apply to a sandbox, as `Profile`s in the
// order profile.ts runs them: team profiles of the sandbox's namespace whose selector matches its
// labels, and global ones whose selector matches its platform labels only (schema/api/traffic-policy.ts
// `selectsSandbox`, review 25 M4: a tenant's label can neither put its sandbox under a global
// profile nor take it out of one with a `NotIn`/`DoesNotExist`); by priority (lower first,
// default 1000), then creation time, name, namespace, a global one first on an exact tie. A
// selected profile this proxy cannot enforce as written becomes one that blocks every inspected
// request saying why: a security profile that silently did nothing would fail open. Pure.
import { selectsSandbox, type LabelSelector } from "../../../schema/api/traffic-policy.ts";
import { unsupported, type Profile, type ProfileRule } from "./profile.ts";

export interface ProfileObject {
  kind: "SecurityProfile" | "GlobalSecurityProfile";
  metadata: { name: string; namespace?: string; creationTimestamp?: string };
  spec: { selector?: LabelSelector; priority?: number; rules?: unknown; rateLimit?: { requestsPerMinute?: number; scope?: "Inspected" | "All" } };
}

export interface ProfilesFor {
  profiles: Profile[];
  /** Selected profiles that block everything instead, with why. */
  refused: { profile: string; reason: string }[];
  /** The lowest `rateLimit.requestsPerMinute` of the selected profiles, if any sets one. */
  requestsPerMinute?: number;
  /** Whether a selected profile's limit counts all the sandbox's requests (`scope: All`). */
  rateLimitAll?: boolean;
}

function rulesOf(raw: unknown): ProfileRule[] | string {
  if (raw === undefined) return [];
  if (!Array.isArray(raw)) return "rules is not a list";
  for (const r of raw as unknown[]) {
    const rule = r as Partial<ProfileRule> | null;
    if (!rule || typeof rule.name !== "string" || !Array.isArray(rule.match) || typeof rule.actions !== "object" || rule.actions === null) {
      return "every rule needs a name, a match list and actions";
    }
    if (!rule.match.every((m) => m && Array.isArray(m.domains) && m.domains.every((d) => typeof d === "string"))) return `rule "${rule.name}": match needs domains`;
  }
  return raw as ProfileRule[];
}

/** `sandbox.labels`: its selector labels (`selectorLabels`: the tenant's and the platform's). */
export function profilesFor(objects: readonly ProfileObject[], sandbox: { namespace: string; labels: Record<string, string> }): ProfilesFor {
  const chosen = objects.filter((o) => {
    const global = o.kind === "GlobalSecurityProfile";
    return (global || o.metadata.namespace === sandbox.namespace) && selectsSandbox(o.spec.selector, sandbox.labels, global);
  });
  const key = (o: ProfileObject) => [o.spec.priority ?? 1000, Date.parse(o.metadata.creationTimestamp ?? "") || 0, o.metadata.name, o.metadata.namespace ?? ""] as const;
  chosen.sort((a, b) => {
    const [ka, kb] = [key(a), key(b)];
    for (let i = 0; i < ka.length; i++) if (ka[i] !== kb[i]) return ka[i]! < kb[i]! ? -1 : 1;
    return a.kind === b.kind ? 0 : a.kind === "GlobalSecurityProfile" ? -1 : 1;
  });
  const out: ProfilesFor = { profiles: [], refused: [] };
  const limits = chosen.map((o) => o.spec.rateLimit?.requestsPerMinute).filter((n): n is number => typeof n === "number" && n > 0);
  if (limits.length) out.requestsPerMinute = Math.min(...limits);
  if (limits.length && chosen.some((o) => o.spec.rateLimit?.scope === "All")) out.rateLimitAll = true;
  chosen.forEach((o, i) => {
    const name = o.kind === "GlobalSecurityProfile" ? o.metadata.name : `${o.metadata.namespace}/${o.metadata.name}`;
    const rules = rulesOf(o.spec.rules);
    const p: Profile | undefined = typeof rules === "string" ? undefined : { name, priority: i, rules };
    const reason = typeof rules === "string" ? rules : unsupported(p!);
    if (reason === undefined) return void out.profiles.push(p!);
    out.refused.push({ profile: name, reason });
    out.profiles.push({ name, priority: i, rules: [{ name: `${name} (not enforceable: ${reason})`, match: [{ domains: ["*"] }], actions: { block: { statusCode: 403 } } }] });
  });
  return out;
}
