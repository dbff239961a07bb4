// Runs one lifecycle hook (schema/api/hooks.ts) against a sandbox, from the edge, through its
// cluster's signed ingress (ingress-client.ts): an exec hook is the runtime's own process API
// (`process.Process/Start`, Connect protocol with JSON, as root), an HTTP hook a request to a port
// of the sandbox. Both end within the hook's timeout; a hook that runs past it counts as failed.
// The callers (the pause and resume operations, and SandboxUpdateOps for preUpgrade/postUpgrade)
// call `runHook`, then `hookVerdict` says whether to go on and what condition to leave.
//
// The command and its arguments are tenant data handed to the sandbox's own runtime; nothing on
// the host interprets them.
import type { Hook, HookName } from "../../schema/api/hooks.ts";
import type { Env } from "../env.ts";
import { edgeFetch, readBounded, readBoundedText } from "../ingress-client.ts";
import type { HookConditionType } from "../sandbox/state.ts";
import { decodeProcessStream, startRequestBody, type ProcessRun } from "./connect-stream.ts";

const ENVD_PORT = 49983;
/** Output kept for the condition's message. */
const MAX_OUTPUT = 512;

export interface HookTarget {
  cluster: string;
  sandboxId: string;
  /** The sandbox's runtime token (X-Access-Token); null when unsecured. */
  accessToken: string | null;
}

export interface HookOutcome {
  ok: boolean;
  /** `Succeeded`, `Failed` (non-zero exit, HTTP status ≥ 400), `Timeout`, `Unreachable`. */
  reason: "Succeeded" | "Failed" | "Timeout" | "Unreachable";
  message: string;
}

/** Runs `hook` on the sandbox; never throws. */
export async function runHook(env: Env, target: HookTarget, hook: Hook): Promise<HookOutcome> {
  const timeoutMs = hook.timeoutSeconds * 1000;
  const started = Date.now();
  const timedOut = () => Date.now() - started >= timeoutMs - 50;
  try {
    if (hook.exec) {
      const run = await execInSandbox(env, target, hook.exec.command, timeoutMs);
      if (run === null) return timedOut() ? timeout(hook) : { ok: false, reason: "Unreachable", message: "the sandbox's runtime did not answer" };
      if ("refused" in run) return { ok: false, reason: "Failed", message: run.refused };
      const output = clip([run.stderr, run.stdout].filter(Boolean).join("\n").trim());
      // The end event's own error only repeats a non-zero exit ("exit status 3"): the code says it.
      if (run.exitCode === null) {
        if (timedOut()) return timeout(hook);
        return { ok: false, reason: "Failed", message: `${run.error ?? "the command ended without an exit status"}${output ? `: ${output}` : ""}` };
      }
      if (run.exitCode !== 0) return { ok: false, reason: "Failed", message: `exit code ${run.exitCode}${output ? `: ${output}` : ""}` };
      return { ok: true, reason: "Succeeded", message: output ? `exit code 0: ${output}` : "exit code 0" };
    }
    const http = hook.http!;
    const res = await edgeFetch(env, { ...target, port: http.port, method: http.method, pathAndQuery: http.path, timeoutMs });
    if (!res) return timedOut() ? timeout(hook) : { ok: false, reason: "Unreachable", message: `nothing answered on port ${http.port}` };
    const body = clip((await readBoundedText(res)).trim());
    const line = `HTTP ${res.status}${body ? `: ${body}` : ""}`;
    return res.status < 400 ? { ok: true, reason: "Succeeded", message: line } : { ok: false, reason: "Failed", message: line };
  } catch (err) {
    return timedOut() ? timeout(hook) : { ok: false, reason: "Failed", message: clip(String(err)) };
  }
}

/**
 * Runs `command` inside the sandbox as root through its runtime and waits for it (at most
 * `timeoutMs`): its output and exit code; null when the runtime did not answer in time.
 */
export async function execInSandbox(env: Env, target: HookTarget, command: string[], timeoutMs: number): Promise<ProcessRun | { refused: string } | null> {
  const res = await edgeFetch(env, {
    ...target,
    port: ENVD_PORT,
    method: "POST",
    pathAndQuery: "/process.Process/Start",
    headers: { "content-type": "application/connect+json", "connect-protocol-version": "1", authorization: `Basic ${btoa("root:")}` },
    body: startRequestBody(command),
    timeoutMs,
  });
  if (!res) return null;
  // Read bounded as any answer: on Kubernetes the runtime is the pod's, where the tenant's code runs.
  // 4 bytes a character at most: enough for the MAX_OUTPUT characters clip keeps.
  if (!res.ok) return { refused: `the runtime refused the command: HTTP ${res.status} ${clip(await readBoundedText(res, 4 * MAX_OUTPUT))}` };
  return decodeProcessStream(await readBounded(res));
}

export interface HookVerdict {
  /** Whether what the hook guards goes on (a success, or a failure with `Ignore`). */
  proceed: boolean;
  condition: { type: HookConditionType; status: "True" | "False"; reason: string; message: string };
  /** For the caller's answer when it does not proceed (the E2B pause's 409). */
  refusal: string | null;
}

const CONDITION: Record<HookName, HookConditionType> = { prePause: "PrePauseHook", postResume: "PostResumeHook", preUpgrade: "PreUpgradeHook", postUpgrade: "PostUpgradeHook" };

/** Pure: what a hook's outcome means under its failure policy. */
export function hookVerdict(name: HookName, hook: Pick<Hook, "failurePolicy">, outcome: HookOutcome): HookVerdict {
  const type = CONDITION[name];
  if (outcome.ok) return { proceed: true, condition: { type, status: "True", reason: "Succeeded", message: outcome.message }, refusal: null };
  if (hook.failurePolicy === "Ignore") {
    return { proceed: true, condition: { type, status: "False", reason: `${outcome.reason}Ignored`, message: `${outcome.message} (failurePolicy Ignore)` }, refusal: null };
  }
  return { proceed: false, condition: { type, status: "False", reason: outcome.reason, message: outcome.message }, refusal: `${name} hook failed: ${outcome.message}` };
}

function timeout(hook: Hook): HookOutcome {
  return { ok: false, reason: "Timeout", message: `did not finish within ${hook.timeoutSeconds} s` };
}

function clip(s: string): string {
  return s.length > MAX_OUTPUT ? `${s.slice(0, MAX_OUTPUT)}…` : s;
}
