// Admin view of one sandbox's machine: GET /admin/sandboxes/{id} → its phase and OpenKruise
// conditions (Ready, SandboxPaused, the lifecycle hooks' PrePauseHook/PostResumeHook, …), which
// E2B's sandbox detail has no field for; for a sandbox with an auto-pause policy, its probe; and
// its event list (the steps update ops runs and lifecycle hooks took on it).
import { Hono } from "hono";
import { sandboxNotFoundMessage } from "../../schema/errors.ts";
import { SANDBOX_ID_PATTERN } from "../../schema/protocol/ids.ts";
import { ApiError } from "../api-error.ts";
import { requireAdmin } from "../auth/middleware.ts";
import type { AppEnv } from "../env.ts";
import { sandboxHandle } from "./stubs.ts";

export const adminSandboxes = new Hono<AppEnv>();
adminSandboxes.use("/admin/*", requireAdmin());

adminSandboxes.get("/admin/sandboxes/:id", async (c) => {
  const id = c.req.param("id");
  const st = SANDBOX_ID_PATTERN.test(id) ? await sandboxHandle(c.env, id).inspect() : null;
  if (!st) throw new ApiError("sandbox_not_found", sandboxNotFoundMessage(id));
  const probe = await c.env.PROBE.get(c.env.PROBE.idFromName(id)).status();
  return c.json({
    sandboxId: id,
    phase: st.phase,
    conditions: st.conditions.map((x) => ({ ...x, lastTransitionTime: new Date(x.lastTransitionTime).toISOString() })),
    // The auto-pause probe's condition (upstream's `agents.kruise.io/<probe>`), its pauses and wake.
    autoPause: probe && {
      probe: { status: probe.probe.status, message: probe.probe.message, lastTransitionTime: new Date(probe.probe.since).toISOString() },
      pauses: probe.pauses,
      wakeAt: probe.wakeAt === null ? null : new Date(probe.wakeAt).toISOString(),
      // resume.probed: why the last idle verdict did not pause.
      ...(probe.held ? { held: probe.held } : {}),
    },
    // Its own lifecycle hooks (a Sandbox's spec.lifecycle set with kubectl), ahead of the template's.
    lifecycle: st.spec.hooks ?? null,
    // Steps taken on it, newest last: each update ops run's (upgrade started / succeeded / failed,
    // hooks, checkpoint taken / kept / deleted) and each lifecycle hook run; on Kubernetes the same
    // steps are also Events on its Sandbox object.
    events: (st.events ?? []).map((e) => ({ ...e, at: new Date(e.at).toISOString() })),
  });
});
