// Durable Object stubs by name, one place for the routes to find them; each lives beside its
// object (durable-objects/*/stub.ts).
import type { Access } from "../../durable-objects/sandbox/state.ts";
import type { Caller } from "../env.ts";

export { poolName, poolStub } from "../../durable-objects/pool/stub.ts";
export { quotaStub } from "../../durable-objects/quota/stub.ts";
export { sandboxGroupOf, sandboxGroupStub, sandboxHandle, type SandboxHandle } from "../../durable-objects/sandbox/stub.ts";

/** What a caller may reach: its team's sandboxes (whichever key created them), or all for the admin. */
export function accessOf(caller: Caller): Access {
  return { teamId: caller.teamId, admin: caller.admin };
}
