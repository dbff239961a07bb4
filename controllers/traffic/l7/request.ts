// What the proxy does with one inspected request before sending it: SecurityProfiles first
// (profile.ts), then E2B's rules and the plain HTTP rules (policy.ts); the headers to send (the
// sandbox's, less hop-by-hop ones, with the rules' headers and credentials in place), the rules
// that decided, and the MCP tool decider when the host's MCP traffic is governed. Every reading of
// the path (path.ts) is judged: any refusal refuses, and MCP screening applies when any reading's
// rules govern the endpoint (a tool passes only if each such reading allows it). The headers are
// built once, for the sent path; a reading whose rules would rewrite headers otherwise (set,
// remove, a credential) is refused 400 (rule `path`): applying one reading's rewrites would leave
// another's undone for the server that reads the path that way, and no union of a `set` and a
// `remove` of one header is safe. The deciding rule is the sent path's. Pure.
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from "node:http";
import { secretRefs } from "../../../schema/api/secret.ts";
import type { ToolDecider } from "./mcp.ts";
import { decideRequest, decideTool, resolveSecrets, type L7Policy, type ToolVerdict } from "./policy.ts";
import { evaluateProfiles, profileToolVerdict, renderToken, type ProfileOutcome } from "./profile.ts";

export const HOP_HEADERS = new Set(["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "trailer"]);

type Refusal = { refuse: { status: number; rule: string; text: string } };

export type Prepared =
  | Refusal
  | { headers: OutgoingHttpHeaders; rule: string; mcp?: ToolDecider };

export interface RequestAt {
  host: string;
  /** Whether the sandbox's connection is TLS (credentials are added to HTTPS requests only). */
  tls: boolean;
  /** The L4 rule that let the connection out (the audit's rule when no L7 rule matched). */
  allowedBy: string;
  method: string;
  /** What is sent (path and query). */
  path: string;
  /** The other paths servers may read it as (path.ts `readTarget`), each judged too. */
  readings?: readonly string[];
  headers: IncomingHttpHeaders;
}

export function prepareRequest(policy: L7Policy, r: RequestAt, secrets: ReadonlyMap<string, string>): Prepared {
  // The host's own MCP screen depends on the host only: one decider for every reading.
  const hostMcp: ToolDecider | undefined = decideTool(policy, r.host, "") !== undefined ? (tool) => decideTool(policy, r.host, tool) : undefined;
  const sent = decide(policy, r, r.path, hostMcp);
  if ("refuse" in sent) return sent;
  const bare = r.path.split("?")[0];
  // Compared only when the path has another reading (most requests have none).
  let effect: string | undefined;
  const deciders = new Set(sent.mcp ? [sent.mcp] : []);
  let rewrittenOtherwise: string | undefined;
  for (const reading of r.readings ?? []) {
    if (reading === bare) continue;
    const other = decide(policy, r, reading, hostMcp);
    if ("refuse" in other) return other;
    if (rewrittenOtherwise === undefined && headerEffect(other) !== (effect ??= headerEffect(sent))) rewrittenOtherwise = reading;
    if (other.mcp) deciders.add(other.mcp);
  }
  if (rewrittenOtherwise !== undefined) {
    return { refuse: { status: 400, rule: "path", text: `${r.method} ${bare} to ${r.host}: rules that rewrite headers treat it differently from ${rewrittenOtherwise}, which servers may read it as; send ${rewrittenOtherwise}` } };
  }
  const built = buildHeaders(sent, r, secrets);
  if ("refuse" in built) return built;
  const mcp = deciders.size <= 1 ? [...deciders][0] : (tool: string) => everyAllows([...deciders].map((d) => d(tool)));
  return mcp ? { headers: built.headers, rule: sent.rule, mcp } : { headers: built.headers, rule: sent.rule };
}

/** The first refusal among the readings' verdicts, else the first verdict. */
function everyAllows(verdicts: (ToolVerdict | undefined)[]): ToolVerdict | undefined {
  return verdicts.find((v) => v && !v.allowed) ?? verdicts.find((v) => v);
}

/** What the rules decide for one reading of the path: a refusal, or the rewrites its headers get
 * and its MCP screen. */
type Decision = Refusal | { rule: string; prof?: ProfileOutcome; setHeaders: Record<string, string>; mcp?: ToolDecider };

function decide(policy: L7Policy, r: RequestAt, path: string, hostMcp: ToolDecider | undefined): Decision {
  const { host, method } = r;
  const bare = path.split("?")[0];
  const prof = policy.profiles?.length ? evaluateProfiles(policy.profiles, host, method, path) : undefined;
  if (prof?.terminal?.kind === "block") {
    const t = prof.terminal;
    return { refuse: { status: t.status, rule: t.rule, text: t.body || `${method} ${bare} to ${host} is blocked by rule "${t.rule}"` } };
  }
  const bypassed = prof?.terminal?.kind === "bypass";
  const v = bypassed ? { action: "allow" as const, setHeaders: {} as Record<string, string> } : decideRequest(policy, host, method, path);
  const rule = [...(prof?.matched ?? []), ...(v.rule ? [v.rule] : [])].join(",") || r.allowedBy;
  if (v.action === "block") return { refuse: { status: 403, rule, text: `${method} ${bare} to ${host} is blocked by rule "${v.rule}"` } };

  // A credential never crosses the network in clear text.
  const wantsSecret = Object.keys(prof?.secretHeaders ?? {}).length > 0 || Object.values(v.setHeaders).some((x) => secretRefs(x).length > 0);
  if (wantsSecret && !r.tls) return { refuse: { status: 403, rule, text: `credentials are only added to HTTPS requests; ${host} was asked over plain HTTP` } };

  const d = { rule, ...(prof ? { prof } : {}), setHeaders: v.setHeaders };
  if (bypassed) return d;
  const profMcp = prof?.mcp;
  if (profMcp) return { ...d, mcp: (tool) => profileToolVerdict(profMcp, tool) };
  if (hostMcp) return { ...d, mcp: hostMcp };
  return d;
}

/** A reading's header rewrites, comparable: two readings with the same key rewrite alike. */
function headerEffect(d: Exclude<Decision, { refuse: unknown }>): string {
  const sorted = (o: Record<string, unknown>) => Object.entries(o).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const p = d.prof;
  return JSON.stringify([p ? sorted(p.set) : [], p ? [...new Set(p.remove)].sort() : [], p ? sorted(p.secretHeaders) : [], Object.entries(d.setHeaders)]);
}

/** The sandbox's headers less hop-by-hop ones, with the decision's rewrites and credentials in
 * place, or a refusal when a credential is missing. */
function buildHeaders(d: Exclude<Decision, { refuse: unknown }>, r: RequestAt, secrets: ReadonlyMap<string, string>): { headers: OutgoingHttpHeaders } | Refusal {
  const headers: OutgoingHttpHeaders = {};
  for (const [k, val] of Object.entries(r.headers)) if (!HOP_HEADERS.has(k) && val !== undefined) headers[k] = val;
  const set = (values: Record<string, string>) => {
    for (const [k, val] of Object.entries(values)) {
      for (const existing of Object.keys(headers)) if (existing.toLowerCase() === k.toLowerCase()) delete headers[existing];
      headers[k] = val;
    }
  };
  const { prof, rule } = d;
  if (prof) {
    for (const name of prof.remove) delete headers[name];
    set(prof.set);
    for (const [h, [template, secret]] of Object.entries(prof.secretHeaders)) {
      const value = secrets.get(secret);
      // No credential, no request: the destination never sees a half-made one.
      if (value === undefined) return { refuse: { status: 403, rule, text: `rule "${rule}": credential "${secret}" is not available` } };
      set({ [h]: renderToken(template, value) });
    }
  }
  set(resolveSecrets(d.setHeaders, secrets));
  return { headers };
}
