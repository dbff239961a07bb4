import { z } from "zod";
import { rulePathProblem } from "../egress/path.ts";
import { SecretName } from "./secret.ts";
import { TeamName } from "./team.ts";
import { globalSelectorRefusal, LabelSelectorSchema, TrafficPolicyName } from "./traffic-policy.ts";

/*
 * SecurityProfile / GlobalSecurityProfile (L7 egress), as the admin API takes them and as the edge
 * sends them to agents (schema/protocol/messages.ts `securityProfiles`): the CRDs' spec
 * (schema/crd/definitions.ts, OpenKruise §1.8/§6.2) limited to what the traffic-proxy enforces
 * (controllers/traffic/l7/profile.ts). Anything beyond that subset is a 400 naming the field, never
 * a profile enforced in part: Regex paths (no tenant regex is compiled on the host), port, scheme,
 * header and query matches, `inputs`, audit webhooks, AliyunSTS. Prefix and Exact paths must be in
 * the form the proxy judges requests in (schema/egress/path.ts), else they would never match.
 * One addition: `rateLimit.requestsPerMinute`, a token bucket per sandbox over the requests the
 * proxy inspects for it, or with `scope: All` over all its requests (the lowest of the profiles
 * that select it; All if any of those with a limit says so).
 */

export const MAX_SECURITY_PROFILES = 200;
const MAX_RULES = 50;
const MAX_LIST = 16;

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** Headers the proxy owns: a profile cannot redirect or reframe the request. */
const RESERVED = new Set(["host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer", "keep-alive", "proxy-connection"]);
const HeaderName = z
  .string()
  .max(128)
  .regex(TOKEN, "a header name must be an HTTP token")
  .refine((n) => !RESERVED.has(n.toLowerCase()), "the proxy sets this header itself");
const HeaderValue = z
  .string()
  .max(8192)
  .refine((v) => !/[\r\n\0]/.test(v), "a header value may not hold a line break or NUL");
/** `*` (any host), a DNS name, or `*.name` (its subdomains at any depth, not the apex). */
const Domain = z
  .string()
  .max(253)
  .regex(/^(\*|(\*\.)?([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)$/i, "a domain is *, a DNS name, or *.name for its subdomains");
const AnyPath = z.string().min(1).max(1024).startsWith("/");
/** Compared byte for byte with each reading of a request's path, so written in that form. */
const RulePath = AnyPath.superRefine((v, ctx) => {
  const problem = v.startsWith("/") ? rulePathProblem(v) : undefined;
  if (problem) ctx.addIssue({ code: "custom", message: problem });
});
const matchOf = (path: typeof AnyPath) =>
  z.strictObject({
    domains: z.array(Domain).min(1).max(MAX_LIST),
    paths: z
      .array(z.strictObject({ type: z.enum(["Prefix", "Exact"], { error: "path type must be Prefix or Exact (Regex is not supported)" }).optional(), value: path }))
      .max(MAX_LIST)
      .optional(),
    methods: z.array(z.string().regex(/^[A-Za-z]{1,16}$/, "a method is letters only")).max(MAX_LIST).optional(),
  });
const ToolAction = z.enum(["allow", "deny"]);
const Actions = z.strictObject({
  bypass: z.boolean().optional(),
  block: z.strictObject({ statusCode: z.int().min(400).max(599).optional(), body: z.string().max(4096).optional() }).optional(),
  mcpToolPolicy: z
    .strictObject({
      rules: z
        .array(z.strictObject({ method: z.literal("tools/call").optional(), toolNames: z.array(z.string().min(1).max(128)).max(50).optional(), action: ToolAction }))
        .max(MAX_RULES)
        .optional(),
      defaultAction: ToolAction.optional(),
    })
    .optional(),
  headerManipulation: z
    .strictObject({ set: z.array(z.strictObject({ name: HeaderName, value: HeaderValue })).max(MAX_LIST).optional(), remove: z.array(HeaderName).max(MAX_LIST).optional() })
    .optional(),
  tokenTransformation: z
    .strictObject({
      type: z.literal("ApiKey", { error: "tokenTransformation supports type ApiKey only" }).optional(),
      targetHeader: HeaderName.optional(),
      apiKey: z.strictObject({ valueTemplate: HeaderValue.optional() }).optional(),
      credentialRef: z.strictObject({ secret: z.strictObject({ name: SecretName }) }),
    })
    .optional(),
});
const ruleOf = (path: typeof AnyPath) => z.strictObject({ name: z.string().min(1).max(128), match: z.array(matchOf(path)).min(1).max(MAX_LIST), actions: Actions });
export const SecurityProfileRule = ruleOf(RulePath);

const specOf = (path: typeof AnyPath) =>
  z.strictObject({
    priority: z.int().min(0).max(2 ** 31 - 1).default(1000),
    selector: LabelSelectorSchema.optional(),
    rules: z.array(ruleOf(path)).max(MAX_RULES).default([]),
    /** `scope` Inspected (default): the requests to hosts some rule names; All: every request of
     * the sandbox (every HTTP(S) host is then inspected, and another TCP connection counts as one). */
    rateLimit: z.strictObject({ requestsPerMinute: z.int().min(1).max(1_000_000), scope: z.enum(["Inspected", "All"]).optional() }).optional(),
  });
/** A profile's spec (the admin API's PUT body; the CRD's `spec` within the subset above). */
export const SecurityProfileSpec = specOf(RulePath);
export type SecurityProfileSpec = z.infer<typeof SecurityProfileSpec>;

export const SecurityProfileName = TrafficPolicyName;

/** A spec as stored and sent to agents and pods: its paths need not be in the judged form, which
 * only the entry points (SecurityProfileSpec) require. A path stored before they did matches
 * nothing; refusing it here would make every agent drop the whole set (an unparseable frame)
 * and keep enforcing the one it had. */
const StoredSpec = specOf(AnyPath);

/** One profile as the edge sends it: `team` null for a GlobalSecurityProfile (every team's
 * sandboxes); `createdAt` (ms) orders profiles of equal priority. */
export const SecurityProfileEntry = z.object({ team: TeamName.nullable(), name: SecurityProfileName, spec: StoredSpec, createdAt: z.int().nonnegative() });
export type SecurityProfileEntry = z.infer<typeof SecurityProfileEntry>;

/** The secrets a profile's `tokenTransformation`s name, lower-cased (as the edge stores them). */
export function tokenSecretNames(spec: SecurityProfileSpec): string[] {
  return spec.rules.flatMap((r) => {
    const name = r.actions.tokenTransformation?.credentialRef.secret.name;
    return name ? [name.toLowerCase()] : [];
  });
}

type StoredRule = SecurityProfileEntry["spec"]["rules"][number];
/** A rule that adds a literal of its own to a request (`headerManipulation.set` values,
 * `tokenTransformation.apiKey.valueTemplate`): it may be a credential (a hard-coded bearer token). */
const carriesLiteral = (r: StoredRule) => Boolean(r.actions.headerManipulation?.set?.length || r.actions.tokenTransformation?.apiKey?.valueTemplate !== undefined);

/** The spec as a cluster not trusted with the team's credentials gets it (ClusterDO, a team not
 * bound to the cluster): each rule that carries a literal becomes a `block` (403, `why` its body),
 * so the request it would have put the value on is refused and audited, as one whose secret is
 * withheld is, rather than sent without it. The other rules (restrictions) are unchanged. */
export function withholdLiterals(spec: SecurityProfileEntry["spec"], why: string): SecurityProfileEntry["spec"] {
  if (!spec.rules.some(carriesLiteral)) return spec;
  return { ...spec, rules: spec.rules.map((r) => (carriesLiteral(r) ? { name: r.name, match: r.match, actions: { block: { statusCode: 403, body: why } } } : r)) };
}

/** Why a GlobalSecurityProfile cannot hold this spec, or null: one applies to every team's
 * sandboxes, so a `tokenTransformation` in it would put each team's secret of that name into a
 * header on whatever host that team's sandboxes call. Only a team's own profile may name the
 * team's secrets. Nor a selector that names a template without its teams (globalSelectorRefusal). */
export function globalProfileRefusal(spec: SecurityProfileSpec): string | null {
  const named = tokenSecretNames(spec);
  if (named.length) return `a GlobalSecurityProfile may not name secrets (tokenTransformation of "${named[0]}"): it applies to every team's sandboxes; put it in a team's SecurityProfile`;
  return globalSelectorRefusal(spec.selector);
}
