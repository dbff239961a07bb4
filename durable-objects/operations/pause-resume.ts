// Pausing and resuming a sandbox with its template's lifecycle hooks (schema/api/hooks.ts): a
// `prePause` runs before the pause (a failure under `Fail` keeps the sandbox running and refuses
// the pause with 409 and the hook's message), a `postResume` after a resume. Each run leaves its
// condition on the sandbox and an audit row (the event). The E2B pause and connect/resume routes
// call these; so does anything else that pauses or resumes on a user's behalf.
import type { Hook, HookName } from "../../schema/api/hooks.ts";
import { ErrorCode } from "../../schema/errors.ts";
import type { PauseStrategy } from "../../schema/protocol/index.ts";
import type { Env } from "../env.ts";
import { hookVerdict, runHook, type HookVerdict } from "../hooks/run-hook.ts";
import type { SandboxInfo } from "../sandbox/info.ts";
import type { Access, Result } from "../sandbox/state.ts";
import { sandboxHandle, type SandboxHandle } from "../sandbox/stub.ts";
import { audit } from "../store/audit.ts";
import { getDb } from "../store/db.ts";
import { resolveTemplateCached } from "../store/template-cache.ts";

/** Answered once the sandbox is paused, bounded by `waitMs` (SandboxGroupDO.pause; 0: once the
 * pause is stored). With a `prePause` hook the team quota's paused slot is reserved first: a pause
 * the quota refuses (429, 503) never runs the hook, which may stop what the sandbox runs. */
export async function pauseSandbox(env: Env, id: string, access: Access, strategy?: PauseStrategy, waitMs?: number): Promise<Result> {
  const h = sandboxHandle(env, id);
  const info = await h.info(access);
  const hook = info.ok && info.sandbox.state === "running" ? await lifecycleHook(env, info.sandbox, "prePause") : null;
  if (info.ok && hook) {
    const reserved = await h.reservePause(access, strategy);
    if (!reserved.ok) return reserved;
    let verdict: HookVerdict | null;
    try {
      verdict = await runLifecycleHook(env, h, access, info.sandbox, "prePause", hook);
    } catch (err) {
      await h.cancelPause(access);
      throw err;
    }
    if (verdict && !verdict.proceed) {
      await h.cancelPause(access);
      return { ok: false, error: { code: ErrorCode.conflict, message: verdict.refusal! } };
    }
  }
  return h.pause(access, strategy, waitMs);
}

/** An update ops run's `preUpgrade`/`postUpgrade` on one of its sandboxes (the run's own hook, else
 * the template's); null when there is none or the sandbox is gone. */
export async function runUpgradeHook(env: Env, teamId: string, id: string, name: "preUpgrade" | "postUpgrade", given?: Hook): Promise<HookVerdict | null> {
  const h = sandboxHandle(env, id);
  const access = { teamId, admin: true };
  const info = await h.info(access);
  return info.ok ? runLifecycleHook(env, h, access, info.sandbox, name, given) : null;
}

/** E2B connect (and resume): `postResume` runs when it resumed the sandbox, before the answer. */
export async function connectSandbox(env: Env, id: string, access: Access, opts: { timeoutS: number; memory?: boolean }) {
  const h = sandboxHandle(env, id);
  const res = await h.connectSandbox(access, opts);
  if (res.ok && res.resumed) await runLifecycleHook(env, h, access, res.sandbox, "postResume");
  return res;
}

/** After a wake-on-traffic resumed the sandbox (the gateway, beside the forwarded request). */
export async function afterWake(env: Env, id: string, teamId: string): Promise<void> {
  const h = sandboxHandle(env, id);
  const access = { teamId, admin: true };
  const info = await h.info(access);
  if (info.ok) await runLifecycleHook(env, h, access, info.sandbox, "postResume");
}

/** Runs `given`, else the sandbox's own hook `name` (kubectl's Sandbox spec.lifecycle), else the
 * template's, if any; null when there is none. */
export async function runLifecycleHook(env: Env, h: SandboxHandle, access: Access, sandbox: SandboxInfo, name: HookName, given?: Hook): Promise<HookVerdict | null> {
  const hook = given ?? (await lifecycleHook(env, sandbox, name));
  if (!hook) return null;
  const found = await h.route();
  if (!found.ok) return null;
  const outcome = await runHook(env, { cluster: found.route.cluster, sandboxId: sandbox.sandboxId, accessToken: found.route.envdAccessToken }, hook);
  const verdict = hookVerdict(name, hook, outcome);
  await h.recordHook(access, verdict.condition);
  await audit(getDb(env), {
    teamId: sandbox.teamId,
    keyId: null,
    action: `hook.${name}`,
    target: sandbox.sandboxId,
    detail: { status: verdict.condition.status, reason: verdict.condition.reason, message: verdict.condition.message },
  }).catch(() => {});
  return verdict;
}

/** The sandbox's own hook `name` (kubectl's Sandbox spec.lifecycle), else its template's; null when none. */
async function lifecycleHook(env: Env, sandbox: SandboxInfo, name: HookName): Promise<Hook | null> {
  return sandbox.hooks?.[name] ?? (await resolveTemplateCached(getDb(env), sandbox.teamId, sandbox.templateId))?.spec.lifecycle?.[name] ?? null;
}
