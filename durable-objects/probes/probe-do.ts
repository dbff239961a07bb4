// ProbeDO: one per sandbox with an auto-pause policy (`idFromName(sandboxId)`), a thin shell over
// probes/machine.ts. Its alarm runs the probe inside the sandbox every `periodSeconds` through the
// sandbox's runtime (hooks/run-hook.ts `execInSandbox`), or a GET to a port of the sandbox through
// its cluster's ingress (an HTTP probe: the body is the output), while the sandbox runs; when the machine
// says idle it pauses the sandbox through the pause operation (so the prePause hook runs and a
// failing one keeps it running), then wakes it at the scheduled time through the connect
// operation (postResume runs). While the sandbox is paused, whoever resumed it (traffic, a
// connect, the schedule) restarts the count from scratch. It stops when the sandbox is gone.
//
// Why an object of its own and not the sandbox's group: the probe is an outbound call per sandbox
// per period that may take seconds; the group's alarm serves 1,000s of sandboxes' timers and must
// never wait on one of them.
import { DurableObject } from "cloudflare:workers";
import { AutoPausePolicy } from "../../schema/api/auto-pause.ts";
import { goDuration } from "../../schema/api/extensions.ts";
import { ErrorCode } from "../../schema/errors.ts";
import type { Env } from "../env.ts";
import { execInSandbox } from "../hooks/run-hook.ts";
import { edgeFetch, readBoundedText } from "../ingress-client.ts";
import { connectSandbox, pauseSandbox } from "../operations/pause-resume.ts";
import type { Result } from "../sandbox/state.ts";
import { sandboxHandle } from "../sandbox/stub.ts";
import { initialProbe, isIdle, nextResume, observeProbe, probedWake, type ProbeResult, type ProbeState } from "./machine.ts";
import type { Probe } from "../../schema/api/auto-pause.ts";

/** The longest wait between pauses the team quota refused (doubling from the probe's period). */
const QUOTA_BACKOFF_MAX_MS = 10 * 60_000;

/** The timeout a scheduled wake gives the resumed sandbox (E2B's minimum resume timeout). */
const WAKE_TIMEOUT_S = 300;

interface Stored {
  sandboxId: string;
  teamId: string;
  policy: AutoPausePolicy;
  probe: ProbeState;
  /** Set while paused by this policy with a scheduled wake. */
  wakeAt: number | null;
  pauses: number;
  /** Who set the policy: an E2B create's metadata, or a Sandbox object (kubectl). */
  origin?: ProbeOrigin;
  /** Why the last idle verdict did not pause: the resume probe's answer (`resume.probed`), or the
   * team quota's refusal. */
  held?: string;
  /** Idle verdicts in a row whose pause the team quota refused (over `pausedSandboxes`). */
  quotaRefusals?: number;
}

export type ProbeOrigin = "create" | "sandbox-object";

export interface ProbeStatus {
  probe: ProbeState;
  wakeAt: number | null;
  pauses: number;
  held?: string;
}

export class ProbeDO extends DurableObject<Env> {
  /** Starts (or replaces) the policy of `sandboxId`; the first probe runs one period from now. */
  async start(sandboxId: string, teamId: string, policy: AutoPausePolicy, origin: ProbeOrigin = "create"): Promise<void> {
    const now = Date.now();
    const st: Stored = { sandboxId, teamId, policy: AutoPausePolicy.parse(policy), probe: initialProbe(now), wakeAt: null, pauses: 0, origin };
    await this.ctx.storage.put("state", st);
    await this.ctx.storage.setAlarm(now + st.policy.probe.periodSeconds * 1000);
  }

  /** Forgets the policy: no more probes (the sandbox itself is left as it is). */
  async stop(): Promise<void> {
    await this.ctx.storage.deleteAlarm();
    await this.ctx.storage.deleteAll();
  }

  /** Stops the policy only if `origin` set it (true: it was stopped). */
  async stopFrom(origin: ProbeOrigin): Promise<boolean> {
    const st = await this.ctx.storage.get<Stored>("state");
    if (st?.origin !== origin) return false;
    await this.stop();
    return true;
  }

  async status(): Promise<ProbeStatus | null> {
    const st = await this.ctx.storage.get<Stored>("state");
    return st ? { probe: st.probe, wakeAt: st.wakeAt, pauses: st.pauses, ...(st.held ? { held: st.held } : {}) } : null;
  }

  override async alarm(): Promise<void> {
    const st = await this.ctx.storage.get<Stored>("state");
    if (!st) return;
    const now = Date.now();
    const period = st.policy.probe.periodSeconds * 1000;
    const access = { teamId: st.teamId, admin: true };
    const h = sandboxHandle(this.env, st.sandboxId);
    const found = await h.route();
    if (!found.ok) return this.ctx.storage.deleteAll(); // killed: nothing to probe
    const route = found.route;
    let next = now + period;
    if (route.state === "paused") {
      st.probe = initialProbe(now);
      if (st.wakeAt !== null && now >= st.wakeAt) {
        const woke = await connectSandbox(this.env, st.sandboxId, access, { timeoutS: WAKE_TIMEOUT_S });
        if (woke.ok) st.wakeAt = null;
      } else if (st.wakeAt !== null) next = Math.min(next, st.wakeAt);
    } else if (route.phase === "Running") {
      st.wakeAt = null;
      st.probe = observeProbe(st.probe, await this.runProbe(st, st.policy.probe, route.cluster, route.envdAccessToken), now);
      if (isIdle(st.probe, new RegExp(st.policy.messageRegex), goDuration(st.policy.thresholdDuration, "thresholdDuration"), now)) {
        // Its next task's time, asked just before the pause; an answer that is not one keeps it running.
        const probed = st.policy.resume?.probed;
        const wake = probed && probedWake(await this.runProbe(st, probed.probe, route.cluster, route.envdAccessToken), probed.timeFormat, goDuration(probed.leadTime, "leadTime"), now);
        if (wake && "problem" in wake) st.held = wake.problem;
        // Not waited for (0): the probe's own alarm must not stall on a slow pause, and the pause it
        // stored goes on whether or not the agent has done it yet.
        const paused: Result = wake && "problem" in wake ? { ok: false, error: { code: ErrorCode.conflict, message: wake.problem } } : await pauseSandbox(this.env, st.sandboxId, access, undefined, 0);
        if (!paused.ok && paused.error.code === ErrorCode.quotaExceeded) {
          // Over the team's paused-sandboxes quota: said on its status, and asked again less often
          // (each try is a quota call and a reconcile the refusal starts), until a pause goes through.
          st.held = paused.error.message;
          st.quotaRefusals = (st.quotaRefusals ?? 0) + 1;
          next = now + Math.min(period * 2 ** st.quotaRefusals, QUOTA_BACKOFF_MAX_MS);
        } else if (paused.ok) {
          delete st.held;
          delete st.quotaRefusals;
          st.pauses++;
          st.wakeAt = wake && "at" in wake ? wake.at : nextResume(st.policy.resume, now);
          st.probe = initialProbe(now);
          if (st.wakeAt !== null) next = Math.min(next, st.wakeAt);
        }
      }
    }
    await this.ctx.storage.put("state", st);
    await this.ctx.storage.setAlarm(next);
  }

  private async runProbe(st: Stored, probe: Probe, cluster: string, accessToken: string | null): Promise<ProbeResult> {
    const timeoutMs = probe.timeoutSeconds * 1000;
    const noAnswer: ProbeResult = { ok: false, reason: "Timeout", message: `no answer within ${probe.timeoutSeconds} s` };
    try {
      const http = probe.http;
      if (http) {
        const res = await edgeFetch(this.env, { cluster, sandboxId: st.sandboxId, accessToken, port: http.port, method: "GET", pathAndQuery: http.path, timeoutMs });
        if (!res) return { ...noAnswer, message: `nothing answered on port ${http.port} within ${probe.timeoutSeconds} s` };
        const body = await readBoundedText(res);
        if (res.status >= 400) return { ok: false, reason: "Error", message: `HTTP ${res.status}: ${body.trim().slice(0, 256)}` };
        return { ok: true, output: body };
      }
      const run = await execInSandbox(this.env, { cluster, sandboxId: st.sandboxId, accessToken }, probe.exec!.command, timeoutMs);
      if (run === null) return noAnswer;
      if ("refused" in run) return { ok: false, reason: "Error", message: run.refused };
      if (run.exitCode !== 0) return { ok: false, reason: "Error", message: `exit code ${run.exitCode ?? "none"}: ${run.stderr.trim()}` };
      return { ok: true, output: run.stdout };
    } catch (err) {
      return { ok: false, reason: "Timeout", message: String(err) };
    }
  }
}
