// Edge → cluster ingress request signing, shared by the gateway (workerd) and the agent (Node).
//
// The ingress accepts only requests the edge signed: an HMAC-SHA256 over the sandbox, the port,
// the method, the path with its query and a short expiry, keyed by a key derived from the
// cluster's token. The body is not covered (it streams); the expiry bounds replay.

export const SIGNATURE_HEADER = "x-sbx-edge-signature";

/** The gateway's request id (a trace id: 32 hex digits), sent with a signed request; the ingress
 * puts it on its answer as `X-Request-Id`, so the gateway need not copy a fetched response (whose
 * headers are immutable) to add it. */
export const REQUEST_ID_HEADER = "x-request-id";
export const REQUEST_ID_PATTERN = /^[0-9a-f]{32}$/;
export const SIGNATURE_TTL_S = 60;

/**
 * `sandbox.downloadUrl()`/`uploadUrl()` build `<sandbox URL>/files?…&signature=…` with no sandbox
 * id, for clients that send no headers. Only the runtime holding the token that made the signature
 * can tell which sandbox it is for, so such a request travels unnamed (still edge-signed, with an
 * empty sandbox id) and the runtime matches the signature against its sandboxes.
 */
export function isUnnamedSignedFileRequest(method: string, url: URL): boolean {
  return url.pathname === "/files" && url.searchParams.has("signature") && (method === "GET" || method === "POST");
}

export interface SignedTarget {
  sandboxId: string;
  port: number;
  method: string;
  /** Path plus query, exactly as forwarded. */
  pathAndQuery: string;
}

const encoder = new TextEncoder();

/** What the MAC covers (the agent's Node verifier computes it too: controllers/agent/ingress-verify.ts). */
export function canonicalText(t: SignedTarget, expires: number): string {
  return `v1\n${t.sandboxId}\n${t.port}\n${t.method.toUpperCase()}\n${t.pathAndQuery}\n${expires}`;
}

export function canonical(t: SignedTarget, expires: number): Uint8Array<ArrayBuffer> {
  return new Uint8Array(encoder.encode(canonicalText(t, expires)));
}

function base64url(bytes: ArrayBuffer): string {
  let s = "";
  for (const b of new Uint8Array(bytes)) s += String.fromCharCode(b);
  return btoa(s).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

/** The signing key is HMAC-SHA256(the cluster's own token, this): one key per cluster, since each
 * cluster's token is its own (schema/protocol/cluster-token.ts). */
export const INGRESS_KEY_LABEL = "sandbox-edge ingress v1";

/** Derives the signing key once per cluster token; callers cache the CryptoKey. */
export async function ingressKey(clusterToken: string): Promise<CryptoKey> {
  const root = await crypto.subtle.importKey("raw", encoder.encode(clusterToken), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const derived = await crypto.subtle.sign("HMAC", root, encoder.encode(INGRESS_KEY_LABEL));
  return crypto.subtle.importKey("raw", derived, { name: "HMAC", hash: "SHA-256" }, false, ["sign", "verify"]);
}

export async function signIngress(key: CryptoKey, target: SignedTarget, nowMs: number): Promise<string> {
  const expires = Math.floor(nowMs / 1000) + SIGNATURE_TTL_S;
  const mac = await crypto.subtle.sign("HMAC", key, canonical(target, expires));
  return `v1.${expires}.${base64url(mac)}`;
}

export type VerifyResult = { ok: true } | { ok: false; reason: "missing" | "malformed" | "expired" | "mismatch" };

/** A signature header's expiry and MAC (its 43 base64url characters), if it is well formed and
 * current (the MAC still to check). */
export function parseSignature(header: string | null | undefined, nowMs: number): { ok: true; expires: number; mac: string } | Exclude<VerifyResult, { ok: true }> {
  if (!header) return { ok: false, reason: "missing" };
  const m = /^v1\.(\d{1,12})\.([A-Za-z0-9_-]{43})$/.exec(header);
  if (!m) return { ok: false, reason: "malformed" };
  const expires = Number(m[1]);
  if (expires < Math.floor(nowMs / 1000) || expires > Math.floor(nowMs / 1000) + SIGNATURE_TTL_S + 5) return { ok: false, reason: "expired" };
  return { ok: true, expires, mac: m[2]! };
}

/** Verifies a signature header value; `crypto.subtle.verify` compares in constant time. */
export async function verifyIngress(key: CryptoKey, header: string | null | undefined, target: SignedTarget, nowMs: number): Promise<VerifyResult> {
  const sig = parseSignature(header, nowMs);
  if (!sig.ok) return sig;
  const mac = Uint8Array.from(atob(sig.mac.replaceAll("-", "+").replaceAll("_", "/") + "="), (c) => c.charCodeAt(0));
  const ok = await crypto.subtle.verify("HMAC", key, mac, canonical(target, sig.expires));
  return ok ? { ok: true } : { ok: false, reason: "mismatch" };
}

/** Set by the edge on a user-port request of a sandbox with E2B's `network.maskRequestHost`: the
 * Host header the port receives. The gateway drops any client's own, and the ingress takes it
 * only on a request the edge signed. */
export const MASK_HOST_HEADER = "e2b-mask-host";
