// The console's browser session: a login form posts the API key once; the answer sets a cookie
// holding {the key's HMAC, expiry, CSRF token} signed with a key derived from KEY_PEPPER. The key
// itself is never stored in the browser nor put in a URL. The cookie is HttpOnly and SameSite=Strict.
// Over https it is `__Host-console_session` (Secure, Path=/, no Domain): a sandbox's own host
// (`<port>-<id>.<domain>`, which serves whatever its tenant writes) shares the console's domain and
// could otherwise set a `console_session` cookie for it, one the browser sends first, locking the
// operator out or signing them into the tenant's team (cookie tossing); no other host can set or
// shadow a `__Host-` cookie. Over plain http (a local `npm start`) browsers refuse that prefix, so
// there it is `console_session`, scoped to /console. Every request re-resolves the caller from the
// HMAC (the key cache's TTL bounds how long a deleted key keeps working).
import type { Context } from "hono";
import { deleteCookie, getSignedCookie, setSignedCookie } from "hono/cookie";
import type { AppEnv, Env } from "../env.ts";

export type ConsoleEnv = AppEnv & { Variables: { session: Session } };

export const SESSION_COOKIE = "console_session";
export const SESSION_TTL_S = 8 * 3600;

export interface Session {
  /** The API key's HMAC (as stored in the key table). */
  keyHash: string;
  /** ms since the epoch. */
  exp: number;
  /** Sent back in every form; a POST without it is refused (the cookie alone is not enough). */
  csrf: string;
}

function secret(env: Env): string {
  return `console-session\n${env.KEY_PEPPER}`;
}

function randomHex(bytes: number): string {
  return [...crypto.getRandomValues(new Uint8Array(bytes))].map((b) => b.toString(16).padStart(2, "0")).join("");
}

function cookieOptions(c: Context<ConsoleEnv>) {
  const https = new URL(c.req.url).protocol === "https:";
  return https
    ? { prefix: "host" as const, path: "/", httpOnly: true, sameSite: "Strict" as const, secure: true }
    : { path: "/console", httpOnly: true, sameSite: "Strict" as const, secure: false };
}

export async function startSession(c: Context<ConsoleEnv>, keyHash: string, now = Date.now()): Promise<Session> {
  const session: Session = { keyHash, exp: now + SESSION_TTL_S * 1000, csrf: randomHex(16) };
  await setSignedCookie(c, SESSION_COOKIE, JSON.stringify(session), secret(c.env), { ...cookieOptions(c), maxAge: SESSION_TTL_S });
  return session;
}

export function endSession(c: Context<ConsoleEnv>): void {
  deleteCookie(c, SESSION_COOKIE, cookieOptions(c));
}

/** The request's session, or null when there is none, its signature is wrong or it has expired. */
export async function readSession(c: Context<ConsoleEnv>, now = Date.now()): Promise<Session | null> {
  const raw = await getSignedCookie(c, secret(c.env), SESSION_COOKIE, cookieOptions(c).prefix);
  if (typeof raw !== "string") return null;
  try {
    const s = JSON.parse(raw) as Partial<Session>;
    if (typeof s.keyHash !== "string" || !/^[0-9a-f]{64}$/.test(s.keyHash)) return null;
    if (typeof s.exp !== "number" || s.exp <= now || typeof s.csrf !== "string" || s.csrf.length !== 32) return null;
    return { keyHash: s.keyHash, exp: s.exp, csrf: s.csrf };
  } catch {
    return null;
  }
}

/** Constant-time comparison of the form's token with the session's. */
export function csrfMatches(session: Session, sent: unknown): boolean {
  if (typeof sent !== "string" || sent.length !== session.csrf.length) return false;
  let diff = 0;
  for (let i = 0; i < sent.length; i++) diff |= sent.charCodeAt(i) ^ session.csrf.charCodeAt(i);
  return diff === 0;
}
