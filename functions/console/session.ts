// The console's browser session: a login form posts the API key once; the edge records a session
// row (store/console-sessions.ts: a random id, the key's HMAC, the expiry) and the answer sets a
// cookie holding {that id, expiry, CSRF token} signed with a key derived from KEY_PEPPER. Neither
// the key nor its HMAC is stored in the browser or put in a URL. Signing out deletes the row, so a
// copy of the cookie (taken from a shared machine, a proxy's log) is refused from then on; the
// price is one primary-key read per console request, live polls included. The cookie is HttpOnly and SameSite=Strict.
// Over https it is `__Host-console_session` (Secure, Path=/, no Domain): a sandbox's own host
// (`<port>-<id>.<domain>`, which serves whatever its tenant writes) shares the console's domain and
// could otherwise set a `console_session` cookie for it, one the browser sends first, locking the
// operator out or signing them into the tenant's team (cookie tossing); no other host can set or
// shadow a `__Host-` cookie. Over plain http (a local `npm start`) browsers refuse that prefix, so
// there it is `console_session`, scoped to /console. Every request reads its session's row and
// re-resolves the caller from the HMAC (the key cache's TTL bounds how long a deleted key keeps working).
import type { Context } from "hono";
import { deleteCookie, getSignedCookie, setSignedCookie } from "hono/cookie";
import type { AppEnv, Env } from "../env.ts";
import { getDb } from "../../durable-objects/store/db.ts";
import { consoleSessionKey, endConsoleSession, recordConsoleSession } from "../../durable-objects/store/console-sessions.ts";

export type ConsoleEnv = AppEnv & { Variables: { session: Session } };

export const SESSION_COOKIE = "console_session";
export const SESSION_TTL_S = 8 * 3600;

export interface Session {
  /** The session row's id (random, 128 bits). */
  id: string;
  /** The API key's HMAC (as stored in the key table), read from the session's row. */
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
  const session: Session = { id: randomHex(16), keyHash, exp: now + SESSION_TTL_S * 1000, csrf: randomHex(16) };
  await recordConsoleSession(getDb(c.env), { id: session.id, keyHash, expiresAt: session.exp }, now);
  const cookie: CookieBody = { sid: session.id, exp: session.exp, csrf: session.csrf };
  await setSignedCookie(c, SESSION_COOKIE, JSON.stringify(cookie), secret(c.env), { ...cookieOptions(c), maxAge: SESSION_TTL_S });
  return session;
}

/** Ends the session on the server (its cookie, wherever copied, is refused from now on) and in this browser. */
export async function endSession(c: Context<ConsoleEnv>, session: Session): Promise<void> {
  await endConsoleSession(getDb(c.env), session.id);
  deleteCookie(c, SESSION_COOKIE, cookieOptions(c));
}

interface CookieBody {
  sid: string;
  exp: number;
  csrf: string;
}

/** The request's session, or null when there is none, its signature is wrong, it has expired or it was ended. */
export async function readSession(c: Context<ConsoleEnv>, now = Date.now()): Promise<Session | null> {
  const raw = await getSignedCookie(c, secret(c.env), SESSION_COOKIE, cookieOptions(c).prefix);
  if (typeof raw !== "string") return null;
  let s: Partial<CookieBody>;
  try {
    s = JSON.parse(raw) as Partial<CookieBody>;
  } catch {
    return null;
  }
  if (typeof s.sid !== "string" || !/^[0-9a-f]{32}$/.test(s.sid)) return null;
  if (typeof s.exp !== "number" || s.exp <= now || typeof s.csrf !== "string" || s.csrf.length !== 32) return null;
  const keyHash = await consoleSessionKey(getDb(c.env), s.sid, now);
  return keyHash === undefined ? null : { id: s.sid, keyHash, exp: s.exp, csrf: s.csrf };
}

/** Constant-time comparison of the form's token with the session's. */
export function csrfMatches(session: Session, sent: unknown): boolean {
  if (typeof sent !== "string" || sent.length !== session.csrf.length) return false;
  let diff = 0;
  for (let i = 0; i < sent.length; i++) diff |= sent.charCodeAt(i) ^ session.csrf.charCodeAt(i);
  return diff === 0;
}
