// SecurityProfile / GlobalSecurityProfile rules (the CRDs' `rules[{name, match[], actions}]`,
// semantics of OpenKruise Agents' egress profiles) for one request. Profiles in priority order
// (lower first); every matching rule of every profile runs, in order, until a terminal action:
// `bypass` (forward, keeping the mutations so far), `block` (status and body, mutations dropped).
// Per rule: bypass → block → mcpToolPolicy → headerManipulation → tokenTransformation. Match
// clauses are ORed, the fields of a clause ANDed. Pure.
//
// Subset, refused with the rule's name when a profile asks for more: paths of type Prefix and
// Exact (no Regex: the proxy runs on the host and does not compile tenant regexes), no
// ports/schemes/headers/queryParams matches, tokenTransformation of type ApiKey only, whose
// `valueTemplate` may use `{{ .apiKey }}` for the secret named by `credentialRef.secret.name`.
import { glob, hostScore } from "./policy.ts";

export interface ProfileRule {
  name: string;
  match: { domains: string[]; paths?: { type?: "Prefix" | "Exact"; value: string }[]; methods?: string[] }[];
  actions: {
    bypass?: boolean;
    block?: { statusCode?: number; body?: string };
    mcpToolPolicy?: { rules?: { toolNames?: string[]; action: "allow" | "deny" }[]; defaultAction?: "allow" | "deny" };
    headerManipulation?: { set?: { name: string; value: string }[]; remove?: string[] };
    tokenTransformation?: { type?: "ApiKey"; targetHeader?: string; apiKey?: { valueTemplate?: string }; credentialRef?: { secret?: { name: string } } };
  };
}

export interface Profile {
  name: string;
  priority: number;
  rules: ProfileRule[];
}

export interface ProfileOutcome {
  /** Set when a terminal action fired. */
  terminal?: { kind: "bypass"; rule: string } | { kind: "block"; rule: string; status: number; body: string };
  /** Header names lower-case; values may need secrets (`secretHeaders`). */
  set: Record<string, string>;
  remove: string[];
  /** Headers whose value is a template of a secret: header → [template, secret name]. */
  secretHeaders: Record<string, [template: string, secret: string]>;
  /** The MCP tool policy of the first matching rule that has one, with its rule's name. */
  mcp?: { rule: string; policy: NonNullable<ProfileRule["actions"]["mcpToolPolicy"]> };
  /** Names of the rules that matched, in order. */
  matched: string[];
}

const domainMatches = (pattern: string, host: string) => pattern === "*" || hostScore(pattern, host) >= 0;

function ruleMatches(r: ProfileRule, host: string, method: string, path: string): boolean {
  return r.match.some(
    (m) =>
      m.domains.some((d) => domainMatches(d, host)) &&
      (!m.methods?.length || m.methods.some((x) => x.toUpperCase() === method.toUpperCase())) &&
      (!m.paths?.length || m.paths.some((p) => ((p.type ?? "Prefix") === "Exact" ? path === p.value : path.startsWith(p.value)))),
  );
}

/** Why a profile cannot be enforced as written, or undefined. */
export function unsupported(p: Profile): string | undefined {
  for (const r of p.rules) {
    for (const m of r.match) {
      for (const path of m.paths ?? []) if (path.type && path.type !== "Prefix" && path.type !== "Exact") return `rule "${r.name}": path type ${path.type} is not supported`;
      const extra = Object.keys(m).filter((k) => !["domains", "paths", "methods"].includes(k));
      if (extra.length) return `rule "${r.name}": match on ${extra.join(", ")} is not supported`;
      if (!m.domains?.length) return `rule "${r.name}": match needs domains`;
    }
    const t = r.actions.tokenTransformation;
    if (t && ((t.type ?? "ApiKey") !== "ApiKey" || !t.credentialRef?.secret?.name)) return `rule "${r.name}": tokenTransformation supports type ApiKey with credentialRef.secret only`;
  }
  return undefined;
}

export function evaluateProfiles(profiles: readonly Profile[], host: string, method: string, rawPath: string): ProfileOutcome {
  const path = rawPath.split("?")[0] ?? "/";
  const out: ProfileOutcome = { set: {}, remove: [], secretHeaders: {}, matched: [] };
  const ordered = [...profiles].sort((a, b) => a.priority - b.priority || a.name.localeCompare(b.name));
  for (const p of ordered) {
    for (const r of p.rules) {
      if (!ruleMatches(r, host, method, path)) continue;
      out.matched.push(r.name);
      const a = r.actions;
      if (a.bypass) return { ...out, terminal: { kind: "bypass", rule: r.name } };
      if (a.block) return { set: {}, remove: [], secretHeaders: {}, matched: out.matched, terminal: { kind: "block", rule: r.name, status: a.block.statusCode ?? 403, body: a.block.body ?? "" } };
      if (a.mcpToolPolicy && !out.mcp) out.mcp = { rule: r.name, policy: a.mcpToolPolicy };
      for (const s of a.headerManipulation?.set ?? []) {
        out.set[s.name.toLowerCase()] = s.value;
        delete out.secretHeaders[s.name.toLowerCase()];
      }
      for (const name of a.headerManipulation?.remove ?? []) {
        const n = name.toLowerCase();
        out.remove.push(n);
        delete out.set[n];
        delete out.secretHeaders[n];
      }
      const t = a.tokenTransformation;
      if (t?.credentialRef?.secret?.name) {
        const header = (t.targetHeader ?? "Authorization").toLowerCase();
        delete out.set[header];
        out.secretHeaders[header] = [t.apiKey?.valueTemplate ?? "{{ .apiKey }}", t.credentialRef.secret.name.toLowerCase()];
      }
    }
  }
  return out;
}

/** A profile's MCP tool policy for one tool: rules first match (empty toolNames: any tool, names
 * may use `*`), else `defaultAction` (deny by default). */
export function profileToolVerdict(m: NonNullable<ProfileOutcome["mcp"]>, tool: string): { allowed: boolean; rule: string } {
  const hit = (m.policy.rules ?? []).find((r) => !r.toolNames?.length || r.toolNames.some((n) => glob(n, tool)));
  const action = hit?.action ?? m.policy.defaultAction ?? "deny";
  return { allowed: action === "allow", rule: hit ? m.rule : `${m.rule} (defaultAction)` };
}

/** A token template with the secret's value in place of `{{ .apiKey }}`. */
export function renderToken(template: string, value: string): string {
  return template.replace(/\{\{\s*\.apiKey\s*\}\}/g, value);
}
