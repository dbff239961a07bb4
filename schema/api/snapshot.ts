// E2B REST shapes for snapshots and fork (upstream openapi.yml `SandboxSnapshotRequest`,
// `SnapshotInfo`, `SandboxForkRequest`, `SandboxForkResult`, the `/snapshots` query), and how a
// snapshot's E2B id is written and read back: `<team>/<name>:default` for a named snapshot,
// `<id>:default` otherwise, as E2B's snapshot templates are named. What a client passes back
// (`Sandbox.create(snapshotId)`, `deleteSnapshot`, the `name` filter) may omit the team and tag.
import { z } from "zod";
import { MAX_NAME_LENGTH } from "./limits.ts";

/** A snapshot's name: what E2B accepts as a template alias (no `/` or `:`, which its full name uses). */
export const SNAPSHOT_NAME_PATTERN = /^[a-z0-9][a-z0-9_-]{0,62}$/;
/** The only tag a snapshot has. */
export const SNAPSHOT_TAG = "default";

export const SandboxSnapshotRequest = z.object({
  name: z.string().regex(SNAPSHOT_NAME_PATTERN, "must be 1-63 characters of [a-z0-9_-], starting with a letter or digit").optional(),
  /**
   * Not in E2B's request (its snapshots always hold memory): here a snapshot is the file system
   * only, and asking for memory is answered 501 with the reason.
   */
  keepMemory: z.boolean().optional(),
});

export const SnapshotInfo = z.object({
  snapshotID: z.string(),
  names: z.array(z.string()),
});

export const SandboxForkRequest = z.object({
  timeout: z.int().min(0).max(3600).default(15),
  count: z.int().min(1).max(100).default(1),
});

export const ListSnapshotsQuery = z.object({
  sandboxID: z.string().min(1).max(MAX_NAME_LENGTH).optional(),
  name: z.string().min(1).max(MAX_NAME_LENGTH).optional(),
  limit: z.coerce.number().pipe(z.int().min(1).max(100)).default(100),
  nextToken: z.string().min(1).max(MAX_NAME_LENGTH).optional(),
});

/** Why a memory snapshot is refused (a 501's message). */
export const MEMORY_SNAPSHOT_UNSUPPORTED =
  "memory snapshots are not supported: CRIU cannot checkpoint processes on this host's kernel (>= 6.13, criu#2532); snapshots hold the file system only (omit keepMemory)";

/** The E2B id and names of a snapshot. */
export function snapshotNames(s: { id: string; name: string | null }, teamName: string): { snapshotID: string; names: string[] } {
  if (!s.name) return { snapshotID: `${s.id}:${SNAPSHOT_TAG}`, names: [] };
  const full = `${teamName}/${s.name}:${SNAPSHOT_TAG}`;
  return { snapshotID: full, names: [full] };
}

/**
 * What a client's reference names, relative to its team: an id or a name (`x`, `x:default`,
 * `team/x`, `team/x:default`). Undefined when it cannot be one of the team's snapshots (another
 * team's prefix, another tag, characters no id or name has).
 */
export function parseSnapshotRef(ref: string, teamName: string): string | undefined {
  let rest = ref;
  const slash = rest.indexOf("/");
  if (slash >= 0) {
    if (rest.slice(0, slash) !== teamName) return undefined;
    rest = rest.slice(slash + 1);
  }
  const colon = rest.lastIndexOf(":");
  if (colon >= 0) {
    if (rest.slice(colon + 1) !== SNAPSHOT_TAG) return undefined;
    rest = rest.slice(0, colon);
  }
  return SNAPSHOT_NAME_PATTERN.test(rest) ? rest : undefined;
}
