// A sandbox's logs (E2B's logs routes): the sandbox's group checks the caller may see it and asks
// the sandbox's cluster, whose agent keeps the entries (controllers/agent/sandbox-logs.ts).
// A killed sandbox's group no longer shows it; its index row (state killed: its tombstone, from the
// kill on, kept TOMBSTONE_KEEP_MS) still names its team and template, so its team can read the logs its agent keeps a while after the
// kill, from the cluster the template names.
import type { SandboxLogEntry, SandboxLogsQuery } from "../../schema/api/sandbox-logs.ts";
import { ErrorCode } from "../../schema/errors.ts";
import type { Env } from "../env.ts";
import type { Access, Result } from "../sandbox/state.ts";
import { sandboxHandle } from "../sandbox/stub.ts";
import { getDb } from "../store/db.ts";
import { getKilledRow } from "../store/sandbox-index.ts";
import { resolveTemplate } from "../store/templates.ts";

export async function sandboxLogs(env: Env, sandboxId: string, access: Access, query: SandboxLogsQuery): Promise<Result<{ entries: SandboxLogEntry[] }>> {
  const live = await sandboxHandle(env, sandboxId).logs(access, query);
  if (live.ok || live.error.code !== ErrorCode.sandboxNotFound) return live;
  const db = getDb(env);
  const gone = await getKilledRow(db, sandboxId);
  if (!gone || (!access.admin && gone.teamId !== access.teamId)) return live;
  const template = await resolveTemplate(db, gone.teamId, gone.templateId);
  if (!template) return live;
  try {
    return await env.CLUSTER.get(env.CLUSTER.idFromName(template.spec.cluster)).logs(sandboxId, query);
  } catch (err) {
    return { ok: false, error: { code: ErrorCode.agentUnavailable, message: `cluster ${template.spec.cluster}: ${String(err)}` } };
  }
}
