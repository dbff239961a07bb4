// L7 policy for one sandbox (SecurityProfile, E2B's network.rules): which hosts are inspected,
// what a request to them may do, which headers are set on it, and which MCP tools it may call.
// Pure: the handler (handler.ts) asks, this answers with the deciding rule's name.
import { secretRefs } from "../../../schema/api/secret.ts";
import type { Profile } from "./profile.ts";

export type RequestAction = "allow" | "block" | "bypass";

/** One HTTP rule. `host` is exact or `*.suffix` (subdomains at any depth, not the apex). */
export interface HttpRule {
  name: string;
  host: string;
  /** Upper-case; absent: any method. */
  methods?: string[];
  /** Globs on the path without the query (`*` is any run of characters); absent: any path. */
  paths?: string[];
  action: RequestAction;
  /** Set on matching requests, replacing a header of the same name. Values may hold secrets. */
  setHeaders?: Record<string, string>;
}

/** One MCP tool rule: `server` a host pattern as above, `tool` a glob on the tool's name. */
export interface McpRule {
  name: string;
  server: string;
  tool: string;
  action: "allow" | "deny";
}

export interface L7Policy {
  http: HttpRule[];
  mcp: McpRule[];
  /** Requests per minute this sandbox may send through inspection; absent: unlimited. */
  requestsPerMinute?: number;
  /** The limit counts every request: every HTTP(S) host is inspected (each request is seen), and
   * each connection of another protocol counts as one. */
  rateLimitAll?: boolean;
  /** SecurityProfiles selecting this sandbox (profile.ts), evaluated before `http`. */
  profiles?: Profile[];
}

export const EMPTY_POLICY: L7Policy = { http: [], mcp: [] };

/** Exact beats wildcard; among wildcards the longest suffix wins; -1: no match. */
export function hostScore(pattern: string, host: string): number {
  const p = pattern.toLowerCase();
  const h = host.toLowerCase().replace(/\.$/, "");
  if (p === h) return Number.MAX_SAFE_INTEGER;
  if (p.startsWith("*.") && h.endsWith(p.slice(1)) && h.length > p.length - 1) return p.length;
  return -1;
}

/** `*` matches any run of characters. Iterative, at most |pattern|·|s| steps (no backtracking
 * regex: `s` is a sandbox's bytes, matched on the host). */
export function glob(pattern: string, s: string): boolean {
  let p = 0;
  let i = 0;
  let star = -1;
  let mark = 0;
  while (i < s.length) {
    if (p < pattern.length && pattern[p] === "*") {
      star = p++;
      mark = i;
    } else if (p < pattern.length && pattern[p] === s[i]) {
      p++;
      i++;
    } else if (star >= 0) {
      p = star + 1;
      i = ++mark;
    } else return false;
  }
  while (pattern[p] === "*") p++;
  return p === pattern.length;
}

/** Whether connections to `host` are opened and read. A bypassed host (only bypass rules name it)
 * is passed through, even under `rateLimitAll`: the bypass is the more specific word. */
export function inspects(p: L7Policy, host: string): boolean {
  return ruleInspects(p, host) ?? Boolean(p.rateLimitAll && p.requestsPerMinute);
}

/** Whether a rule names `host` for inspection (not only `rateLimitAll`, which counts every
 * connection but names no host): what an address serving such a name must not be reached
 * around by bytes the handler cannot read. */
export function namedForInspection(p: L7Policy, host: string): boolean {
  return ruleInspects(p, host) === true;
}

/** true: a rule inspects `host`; false: only bypass rules name it; undefined: no rule names it. */
function ruleInspects(p: L7Policy, host: string): boolean | undefined {
  const names = (d: string) => d === "*" || hostScore(d, host) >= 0;
  const profileRules = (p.profiles ?? []).flatMap((pr) => pr.rules.filter((r) => r.match.some((m) => m.domains.some(names))));
  if (profileRules.some((r) => !r.actions.bypass)) return true;
  const rules = rulesFor(p.http, host);
  if (rules.some((r) => r.action !== "bypass")) return true;
  if (rules.length > 0 || profileRules.length > 0) return false;
  return rulesFor(p.mcp.map((m) => ({ ...m, host: m.server })), host).length > 0 || undefined;
}

/** The rules of the best-matching host pattern only (rule sets of other patterns are not merged). */
function rulesFor<T extends { host: string }>(rules: T[], host: string): T[] {
  let best = -1;
  for (const r of rules) best = Math.max(best, hostScore(r.host, host));
  return best < 0 ? [] : rules.filter((r) => hostScore(r.host, host) === best);
}

export interface RequestVerdict {
  action: RequestAction;
  rule?: string;
  setHeaders: Record<string, string>;
}

/** The first rule of the host's set that matches method and path decides; none: allowed as is. */
export function decideRequest(p: L7Policy, host: string, method: string, path: string): RequestVerdict {
  const bare = path.split("?")[0] ?? "/";
  for (const r of rulesFor(p.http, host)) {
    if (r.methods && !r.methods.includes(method.toUpperCase())) continue;
    if (r.paths && !r.paths.some((g) => glob(g, bare))) continue;
    return { action: r.action, rule: r.name, setHeaders: r.setHeaders ?? {} };
  }
  return { action: "allow", setHeaders: {} };
}

export interface ToolVerdict {
  allowed: boolean;
  rule: string;
}

/** Undefined when no MCP rule names the server (not governed). Otherwise the first rule whose
 * tool glob matches decides, and a tool no rule names is denied. */
export function decideTool(p: L7Policy, server: string, tool: string): ToolVerdict | undefined {
  const rules = rulesFor(p.mcp.map((m) => ({ ...m, host: m.server })), server);
  if (rules.length === 0) return undefined;
  const r = rules.find((x) => glob(x.tool, tool));
  if (!r) return { allowed: false, rule: `no MCP rule for ${server} allows "${tool}"` };
  return { allowed: r.action === "allow", rule: r.name };
}

/** E2B's `network.rules` (host → [{transform: {headers}}]) as HTTP rules; each rule of a host
 * applies in order, so later headers of the same name win. */
export function e2bRules(rules: Record<string, { transform?: { headers?: Record<string, string> } }[]>): HttpRule[] {
  return Object.entries(rules).map(([host, list]) => ({
    name: `network.rules["${host}"]`,
    host: host.toLowerCase(),
    action: "allow",
    setHeaders: Object.assign({}, ...list.map((r) => r.transform?.headers ?? {})) as Record<string, string>,
  }));
}

/** The secret names a policy's header values refer to (what the edge sends for this sandbox). */
export function referencedSecrets(p: L7Policy): string[] {
  return [...new Set(p.http.flatMap((r) => Object.values(r.setHeaders ?? {}).flatMap(secretRefs)))];
}

/** Header values with `${e2b.secrets.<name>}` replaced. A name without a value leaves the
 * placeholder (the destination sees an unresolved credential, never another secret). */
export function resolveSecrets(values: Record<string, string>, secrets: ReadonlyMap<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(values)) out[k] = v.replace(/\$\{e2b\.secrets\.([^{}]*)\}/g, (m, n: string) => secrets.get(n.toLowerCase()) ?? m);
  return out;
}
