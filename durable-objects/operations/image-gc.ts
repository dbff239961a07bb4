// Freeing built root filesystems (`b-<buildID>`) is garbage collection, reconciled per cluster by
// its ClusterDO, never a side effect of the template write that stopped naming one:
// - claim (libSQL, one statement): an image nothing in libSQL references (templates, tags, builds
//   waiting or running on it: `claimSupersededImages`; a deleted template's builds, in one batch
//   with their delete: `deleteBuildsOf`) is recorded in `freed_images`, after which no template
//   may name it;
// - send (ClusterDO): a claimed image goes to the agent (`rootfsDeletes`) only a grace period after
//   its claim (a create that took the template's spec just before, still on its way to the
//   ClusterDO) and only while no sandbox the cluster keeps (running, paused, a pool member of any
//   revision, a create queued for the agent) names it; it is marked sent, and unsent ones (and
//   those sent in the last hour, the frame having no ack) go with every welcome, so an agent
//   offline at the claim frees later.
// A pass that claims runs after a reference change (`nudgeImageGc`: a template write that moved off
// an image, a tag removed or moved, a build finished or failed), after each hello, and at least
// every `IMAGE_SWEEP_MS` while an agent is connected (a nudge lost to an RPC error, or a change that
// sends none, is caught then). Passes from the alarm while claimed images wait, and after sandboxes
// go, only look at what is already claimed: the claim scans the cluster's builds, and those passes
// can come once a second. A failing pass is tried again at the next alarm or hello; its error
// reaches no API caller.
import type { Env } from "../env.ts";
import { getDb } from "../store/db.ts";
import { claimSupersededImages, markFreesSent, unsentFrees, type UnsentFree } from "../store/template-builds.ts";

/** How long after its claim an image is kept for creates already under way: longer than a
 * create's deadline, so a sandbox whose spec named it reaches the ClusterDO first. */
export const IMAGE_FREE_GRACE_MS = 5 * 60_000;
/** How often, at least, a connected cluster's superseded images are claimed without a nudge. */
export const IMAGE_SWEEP_MS = 60 * 60_000;
/** How soon an image a sandbox or build still holds is looked at again. */
export const IMAGE_RECHECK_MS = 60_000;
/** A welcome sends again what was sent this recently: the frame has no ack, and one written to a
 * session that dropped just then is lost (freeing twice is harmless: the agent ignores a name it
 * does not hold). */
export const IMAGE_RESEND_MS = 60 * 60_000;

/** A rootfs name a build published (`b-<buildID>`); `base` and imported ones are not the edge's. */
export const BUILT_IMAGE = /^b-[a-z0-9-]{1,64}$/;

export function imageGraceMs(env: Pick<Env, "IMAGE_FREE_GRACE_MS">): number {
  const v = Number(env.IMAGE_FREE_GRACE_MS);
  return env.IMAGE_FREE_GRACE_MS !== undefined && Number.isFinite(v) && v >= 0 ? v : IMAGE_FREE_GRACE_MS;
}

/**
 * Which claimed images go to the agent now: those past their grace (one sent before was, and goes
 * again) that neither a sandbox of the cluster (`inUse`) nor a running build holds; `nextAt` is
 * when to look again (null: nothing left).
 */
export function dueFrees(pending: readonly UnsentFree[], inUse: ReadonlySet<string>, now: number, graceMs: number): { send: string[]; nextAt: number | null } {
  const send: string[] = [];
  let nextAt = Infinity;
  for (const p of pending) {
    const due = p.sentAt !== null ? now : p.freedAt + graceMs;
    if (due > now) nextAt = Math.min(nextAt, due);
    else if (p.standing || inUse.has(p.image)) nextAt = Math.min(nextAt, now + IMAGE_RECHECK_MS);
    else send.push(p.image);
  }
  return { send, nextAt: nextAt === Infinity ? null : nextAt };
}

/** What a pass needs of its ClusterDO: the images its sandboxes name, and the frame to its agent
 * (false: no agent connected, nothing sent). */
export interface ImageGcPorts {
  inUse(images: string[]): Set<string>;
  send(images: string[]): boolean;
}

/** One pass for `cluster` (see the file's comment); answers what was sent and when to look again;
 * `welcome`: the pass of a new session, which sends again what was sent in the last hour; `claim`:
 * claim what is newly unreferenced first (false: a recheck of what is claimed already).
 * `now` is the time the decision is made at (tests look past the grace period); a claim is always
 * stamped with the clock's time. */
export async function collectImages(env: Env, cluster: string, ports: ImageGcPorts, now = Date.now(), welcome = false, claim = true): Promise<{ sent: string[]; nextAt: number | null }> {
  const db = getDb(env);
  if (claim) await claimSupersededImages(db, cluster);
  const pending = await unsentFrees(db, cluster, welcome ? now - IMAGE_RESEND_MS : undefined);
  if (!pending.length) return { sent: [], nextAt: null };
  const { send, nextAt } = dueFrees(pending, ports.inUse(pending.map((p) => p.image)), now, imageGraceMs(env));
  if (!send.length || !ports.send(send)) return { sent: [], nextAt };
  await markFreesSent(db, send, now);
  return { sent: send, nextAt };
}

/** Asks `cluster`'s ClusterDO for a pass after a reference change. It only schedules the pass: the
 * caller (a template PUT, the cluster's own build events) does not wait behind it. Never fails the
 * write: a pass that does not run now runs at the next hello or periodic pass. */
export async function nudgeImageGc(env: Env, cluster: string): Promise<void> {
  await env.CLUSTER.get(env.CLUSTER.idFromName(cluster))
    .nudgeImages(cluster)
    .catch((err: unknown) => console.warn(`cluster ${cluster}: image collection not started: ${err instanceof Error ? err.message : String(err)}`));
}
