// The grammar of E2B's `network.rules` (per-host header transforms), as the SDK documents it:
// keys are an exact DNS name or one leading wildcard (`*.example.com`, subdomains at any depth,
// not the apex; a bare `*` is invalid), lower-cased on write; header names are HTTP tokens and
// values carry no line breaks (they become header lines in the proxy). Values may name secrets
// (`${e2b.secrets.<name>}`, the SDK's `Secret.fill`). Pure: the edge refuses bad rules at create
// with these words; the proxy reads them (controllers/traffic/l7/policy.ts `e2bRules`).
import { secretRefs } from "../api/secret.ts";
import { normalizeHost, parseRule } from "./rules.ts";

export type TransformRules = Record<string, { transform?: { headers?: Record<string, string> } }[]>;

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** Headers the proxy owns: a transform cannot redirect or reframe the request. */
const RESERVED = new Set(["host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer", "keep-alive", "proxy-connection"]);
export const MAX_TRANSFORM_VALUE_BYTES = 8192;

/** Every problem, each naming the host and header; empty when the rules are good. */
export function transformErrors(rules: TransformRules): string[] {
  const errors: string[] = [];
  for (const [key, list] of Object.entries(rules)) {
    const host = normalizeHost(key);
    const parsed = host === "*" ? undefined : parseRule(host, "allowOut");
    if (!parsed || typeof parsed === "string" || parsed.kind !== "domain") {
      errors.push(`rules: ${JSON.stringify(key)} is not a domain name or a leading-wildcard pattern (*.example.com)`);
      continue;
    }
    for (const rule of list) {
      for (const [name, value] of Object.entries(rule.transform?.headers ?? {})) {
        const where = `rules[${JSON.stringify(key)}] header ${JSON.stringify(name)}`;
        if (!TOKEN.test(name)) errors.push(`${where}: not a valid header name`);
        else if (RESERVED.has(name.toLowerCase())) errors.push(`${where}: the proxy sets this header itself`);
        if (/[\r\n\0]/.test(value)) errors.push(`${where}: the value has a line break or NUL`);
        if (new TextEncoder().encode(value).length > MAX_TRANSFORM_VALUE_BYTES) errors.push(`${where}: the value is longer than ${MAX_TRANSFORM_VALUE_BYTES} bytes`);
      }
    }
  }
  return errors;
}

/** The rules with lower-cased keys (E2B's canonical form). */
export function normalizeTransforms(rules: TransformRules): TransformRules {
  return Object.fromEntries(Object.entries(rules).map(([k, v]) => [normalizeHost(k), v]));
}

/** The secret names the rules' header values refer to (lower-case, once each). */
export function transformSecrets(rules: TransformRules): string[] {
  return [...new Set(Object.values(rules).flatMap((l) => l.flatMap((r) => Object.values(r.transform?.headers ?? {}).flatMap(secretRefs))))];
}
