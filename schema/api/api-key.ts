// API keys: `e2b_` + 40 hex (the form both SDKs accept), stored only as hex
// HMAC-SHA256(pepper, key). Runs in the Worker and in Node (scripts/seed.ts) on WebCrypto.

export const KEY_PREFIX = "e2b_";
const KEY_HEX_LENGTH = 40;
const KEY_PATTERN = /^e2b_[0-9a-f]{40}$/;

/** Ids of the admin team and key the seed creates; the admin key itself comes from ADMIN_API_KEY. */
export const ADMIN_TEAM_ID = "550e8400-e29b-41d4-a716-446655449999";
export const ADMIN_TEAM_NAME = "admin";
export const ADMIN_KEY_ID = "550e8400-e29b-41d4-a716-446655440000";
/** Keys a team has at most (a 429 past it). E2B's `GET /api-keys` is one unpaged list: this bounds it. */
export const MAX_TEAM_API_KEYS = 100;

export function generateApiKey(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(KEY_HEX_LENGTH / 2));
  return KEY_PREFIX + toHex(bytes);
}

/** Cheap shape check before any hashing: anything else cannot be one of our keys. */
export function looksLikeApiKey(key: string): boolean {
  return KEY_PATTERN.test(key);
}

const hmacKeys = new Map<string, Promise<CryptoKey>>();

export async function hashApiKey(key: string, pepper: string): Promise<string> {
  let hmac = hmacKeys.get(pepper);
  if (!hmac) {
    hmac = crypto.subtle.importKey("raw", new TextEncoder().encode(pepper), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    hmacKeys.set(pepper, hmac);
  }
  const mac = await crypto.subtle.sign("HMAC", await hmac, new TextEncoder().encode(key));
  return toHex(new Uint8Array(mac));
}

/** The masked form listings show: `e2b_` + first 2 and last 4 hex digits, as E2B does. */
export function maskApiKey(key: string): { prefix: string; valueLength: number; maskedValuePrefix: string; maskedValueSuffix: string } {
  const value = key.slice(KEY_PREFIX.length);
  return { prefix: KEY_PREFIX, valueLength: value.length, maskedValuePrefix: value.slice(0, 2), maskedValueSuffix: value.slice(-4) };
}

/** Constant-time equality of two strings of hex digits (lengths are public). */
export function timingSafeEqualHex(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

function toHex(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += b.toString(16).padStart(2, "0");
  return s;
}
