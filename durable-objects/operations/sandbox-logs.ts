// A sandbox's logs (E2B's logs routes): the sandbox's group checks the caller may see it and asks
// the sandbox's cluster, whose agent keeps the entries (controllers/agent/sandbox-logs.ts).
import type { SandboxLogEntry, SandboxLogsQuery } from "../../schema/api/sandbox-logs.ts";
import type { Env } from "../env.ts";
import type { Access, Result } from "../sandbox/state.ts";
import { sandboxHandle } from "../sandbox/stub.ts";

export function sandboxLogs(env: Env, sandboxId: string, access: Access, query: SandboxLogsQuery): Promise<Result<{ entries: SandboxLogEntry[] }>> {
  return sandboxHandle(env, sandboxId).logs(access, query);
}
