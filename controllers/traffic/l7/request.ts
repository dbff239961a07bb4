// What the proxy does with one inspected request before sending it: SecurityProfiles first
// (profile.ts), then E2B's rules and the plain HTTP rules (policy.ts); the headers to send (the
// sandbox's, less hop-by-hop ones, with the rules' headers and credentials in place), the rules
// that decided, and the MCP tool decider when the host's MCP traffic is governed. Every reading of
// the path (path.ts) is judged: any refusal refuses, and MCP screening applies when any reading's
// rules govern the endpoint (a tool passes only if each such reading allows it). The headers and
// the deciding rule are the sent path's. Pure.
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from "node:http";
import { secretRefs } from "../../../schema/api/secret.ts";
import type { ToolDecider } from "./mcp.ts";
import { decideRequest, decideTool, resolveSecrets, type L7Policy, type ToolVerdict } from "./policy.ts";
import { evaluateProfiles, profileToolVerdict, renderToken } from "./profile.ts";

export const HOP_HEADERS = new Set(["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "trailer"]);

export type Prepared =
  | { refuse: { status: number; rule: string; text: string } }
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
  const sent = prepareReading(policy, r, secrets);
  if ("refuse" in sent) return sent;
  const bare = r.path.split("?")[0];
  const deciders = sent.mcp ? [sent.mcp] : [];
  for (const reading of r.readings ?? []) {
    if (reading === bare) continue;
    const other = prepareReading(policy, { ...r, path: reading }, secrets);
    if ("refuse" in other) return other;
    if (other.mcp) deciders.push(other.mcp);
  }
  if (deciders.length <= 1) return deciders[0] ? { ...sent, mcp: deciders[0] } : sent;
  return { ...sent, mcp: (tool) => everyAllows(deciders.map((d) => d(tool))) };
}

/** The first refusal among the readings' verdicts, else the first verdict. */
function everyAllows(verdicts: (ToolVerdict | undefined)[]): ToolVerdict | undefined {
  return verdicts.find((v) => v && !v.allowed) ?? verdicts.find((v) => v);
}

function prepareReading(policy: L7Policy, r: RequestAt, secrets: ReadonlyMap<string, string>): Prepared {
  const { host, method, path } = r;
  const bare = path.split("?")[0];
  const headers: OutgoingHttpHeaders = {};
  for (const [k, val] of Object.entries(r.headers)) if (!HOP_HEADERS.has(k) && val !== undefined) headers[k] = val;
  const set = (values: Record<string, string>) => {
    for (const [k, val] of Object.entries(values)) {
      for (const existing of Object.keys(headers)) if (existing.toLowerCase() === k.toLowerCase()) delete headers[existing];
      headers[k] = val;
    }
  };

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
  set(resolveSecrets(v.setHeaders, secrets));

  if (bypassed) return { headers, rule };
  const profMcp = prof?.mcp;
  if (profMcp) return { headers, rule, mcp: (tool) => profileToolVerdict(profMcp, tool) };
  if (decideTool(policy, host, "") !== undefined) return { headers, rule, mcp: (tool) => decideTool(policy, host, tool) };
  return { headers, rule };
}
