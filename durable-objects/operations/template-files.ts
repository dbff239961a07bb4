// The files of `copy` steps. The SDK asks for an upload link per archive (`GET
// /templates/{id}/files/{hash}`) and PUTs the tar there; the link is the edge's own, signed, and
// the archive is stored in libSQL under (team, hash), one blob of at most MAX_TEMPLATE_FILE_BYTES. Why
// libSQL: the edge is the one place every agent and every isolate reaches, the link needs no
// agent to be connected when the SDK uploads (before the build starts), and content addressing
// per team makes a second build upload nothing.
// (Chunking would lift the bound; not done.) The agent fetches an archive with its cluster
// token, only for a build it runs.
import { MAX_TEAM_FILE_BYTES, TEMPLATE_FILE_TTL_MS } from "../../schema/api/template-build.ts";
import { ApiError } from "../../schema/errors.ts";
import type { Caller, Env } from "../env.ts";
import { isClusterToken } from "../cluster/cluster-auth.ts";
import { getDb } from "../store/db.ts";
import { buildsOf, getBuild, getFile, putFile, useFiles } from "../store/template-builds.ts";

/** How long an upload link stays valid. */
const UPLOAD_TTL_S = 15 * 60;
const enc = new TextEncoder();
const keys = new Map<string, Promise<CryptoKey>>();

function signingKey(env: Env): Promise<CryptoKey> {
  let k = keys.get(env.KEY_PEPPER);
  if (!k) {
    k = (async () => {
      const root = await crypto.subtle.importKey("raw", enc.encode(env.KEY_PEPPER), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
      const derived = await crypto.subtle.sign("HMAC", root, enc.encode("sandbox-edge template files v1"));
      return crypto.subtle.importKey("raw", derived, { name: "HMAC", hash: "SHA-256" }, false, ["sign", "verify"]);
    })();
    keys.set(env.KEY_PEPPER, k);
  }
  return k;
}

const canonical = (teamId: string, hash: string, expires: number) => enc.encode(`PUT\n${teamId}\n${hash}\n${expires}`);
const hex = (b: ArrayBuffer) => [...new Uint8Array(b)].map((x) => x.toString(16).padStart(2, "0")).join("");

/** `GET /templates/{id}/files/{hash}`: present, or where to PUT the archive. */
export async function fileUploadLink(env: Env, caller: Caller, origin: string, templateId: string, hash: string): Promise<{ present: boolean; url?: string }> {
  const db = getDb(env);
  if (!(await buildsOf(db, caller.teamId, templateId)).length) throw new ApiError("template_not_found", `Template "${templateId}" not found`);
  // Present: the SDK will not upload it, so it counts as used now (not expired before the start).
  if ((await useFiles(db, caller.teamId, [hash])).size) return { present: true };
  const expires = Math.floor(Date.now() / 1000) + UPLOAD_TTL_S;
  const mac = hex(await crypto.subtle.sign("HMAC", await signingKey(env), canonical(caller.teamId, hash, expires)));
  const url = new URL(`/template-files/${encodeURIComponent(caller.teamId)}/${hash}`, origin);
  url.searchParams.set("expires", String(expires));
  url.searchParams.set("signature", mac);
  return { present: false, url: url.toString() };
}

/** Checks the signature of an upload link's `PUT` (before its body is read). */
export async function verifyUpload(env: Env, teamId: string, hash: string, expires: number, signature: string): Promise<void> {
  if (!Number.isInteger(expires) || expires < Date.now() / 1000) throw new ApiError("forbidden", "upload link expired");
  const mac = /^[a-f0-9]{64}$/.test(signature) ? new Uint8Array(signature.match(/../g)!.map((x) => parseInt(x, 16))) : new Uint8Array(32);
  if (!(await crypto.subtle.verify("HMAC", await signingKey(env), mac, canonical(teamId, hash, expires)))) throw new ApiError("forbidden", "upload link signature does not match");
}

/** Uploads of one team this isolate reads at once: each holds up to MAX_TEMPLATE_FILE_BYTES in the
 * memory of an isolate that serves every tenant, and a link is reusable for 15 minutes. More wait
 * their turn unread (E2B's JS SDK sends every archive of a build at once, and does not retry a
 * 429), up to MAX_TEAM_UPLOADS_WAITING; past that a 429. */
export const MAX_TEAM_UPLOADS_IN_FLIGHT = 2;
export const MAX_TEAM_UPLOADS_WAITING = 16;
/** How often a waiting upload looks for a turn. A request of a Worker cannot be woken by another
 * request's promise (workerd cancels it as hung), so it polls on a timer of its own. */
const TURN_POLL_MS = 20;
const turns = new Map<string, { reading: number; waiting: number }>();

/**
 * A verified upload's `PUT`: an archive the team already has is answered at once, its body never
 * read (`readBody` not called), and counts as used now, as a present-check does; otherwise the body
 * is read (bounded by the route) and stored once the team has fewer than MAX_TEAM_UPLOADS_IN_FLIGHT
 * being read here.
 */
export async function receiveUpload(env: Env, teamId: string, hash: string, readBody: () => Promise<ArrayBuffer>): Promise<void> {
  if ((await useFiles(getDb(env), teamId, [hash])).size) return;
  const team = turns.get(teamId) ?? { reading: 0, waiting: 0 };
  turns.set(teamId, team);
  const waits = team.reading >= MAX_TEAM_UPLOADS_IN_FLIGHT;
  if (waits) {
    if (team.waiting >= MAX_TEAM_UPLOADS_WAITING) {
      throw new ApiError("quota_exceeded", `the team already has ${MAX_TEAM_UPLOADS_IN_FLIGHT + MAX_TEAM_UPLOADS_WAITING} uploads in progress; retry once one is done`);
    }
    team.waiting++;
    try {
      while (team.reading >= MAX_TEAM_UPLOADS_IN_FLIGHT) await new Promise((turn) => setTimeout(turn, TURN_POLL_MS));
    } finally {
      team.waiting--;
    }
  }
  team.reading++;
  try {
    // Stored while it waited (another upload of the same archive)?
    if (waits && (await useFiles(getDb(env), teamId, [hash])).size) return;
    await storeUpload(env, teamId, hash, await readBody());
  } finally {
    if (--team.reading === 0 && team.waiting === 0) turns.delete(teamId);
  }
}

/** Stores a verified upload (the route bounds it at MAX_TEMPLATE_FILE_BYTES) within the team's
 * bound on stored archives (MAX_TEAM_FILE_BYTES; unused ones expire: TEMPLATE_FILE_TTL_MS). */
async function storeUpload(env: Env, teamId: string, hash: string, data: ArrayBuffer): Promise<void> {
  if (!(await putFile(getDb(env), teamId, hash, data, { maxTeamBytes: MAX_TEAM_FILE_BYTES, ttlMs: TEMPLATE_FILE_TTL_MS }))) {
    throw new ApiError(
      "quota_exceeded",
      `the team's uploaded build files would pass ${MAX_TEAM_FILE_BYTES / 1024 / 1024} MiB; files no build has used for ${TEMPLATE_FILE_TTL_MS / 86_400_000} days are removed as the team uploads`,
    );
  }
}

/** An archive for the agent running `buildId` (authenticated by the route with the cluster token). */
export async function agentFile(env: Env, buildId: string, hash: string, authorization: string | undefined): Promise<ArrayBuffer> {
  const db = getDb(env);
  const b = await getBuild(db, buildId);
  // Only the agent of the build's own cluster: another cluster's token reads no team's files.
  if (!(await isClusterToken(env.CLUSTER_TOKEN, b?.cluster ?? "local", authorization))) throw new ApiError("unauthorized", "invalid cluster token");
  const data = b && b.status === "building" ? await getFile(db, b.teamId, hash) : undefined;
  if (!data) throw new ApiError("not_found", `no file ${hash} for a running build ${buildId}`);
  return data;
}
