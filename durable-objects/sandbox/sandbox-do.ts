// SandboxDO: the per-sandbox address `SANDBOX.idFromName(sandboxId)` that callers written before
// sandbox groups still use (the gateway's route/wake, some tests). It holds no state and forwards
// to the sandbox's SandboxGroupDO. Each one is a Durable Object of its own, so it costs what the
// groups save (a new object per sandbox): the create path never touches it, and new code calls
// `sandboxStub()` (stub.ts) instead.
import { DurableObject } from "cloudflare:workers";
import type { Env } from "../../functions/env.ts";
import { sandboxStub } from "./stub.ts";

export class SandboxDO extends DurableObject<Env> {
  private get sandbox() {
    return sandboxStub(this.env, this.ctx.id.name ?? "");
  }

  route() {
    return this.sandbox.route();
  }

  wake(waitMs?: number) {
    return this.sandbox.wake(waitMs);
  }

  inspect() {
    return this.sandbox.inspect();
  }
}
