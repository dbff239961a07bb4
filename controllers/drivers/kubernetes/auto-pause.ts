// A Sandbox's `spec.probes` + `spec.autoPausePolicy` (OpenKruise Agents §1.1.3, set with kubectl)
// as the edge's auto-pause policy (schema/api/auto-pause.ts), pure: the probe the policy's
// `pause.whenProbedIdleState.probe` names, with its `exec.command` or `httpGet {port, path}`,
// `periodSeconds` and `timeoutSeconds`. The edge runs it (ProbeDO), as for an E2B create's
// auto-pause-policy extension. `resume.whenProbedScheduleTime {probe, timeFormat, leadTime}` (the
// next task's time read from a second probe's output just before the pause) is the policy's
// `resume.probed`, with that probe.
import type { z } from "zod";
import { AutoPausePolicy } from "../../../schema/api/auto-pause.ts";
import type { SandboxObject } from "./objects.ts";

interface CrdProbe {
  name?: string;
  exec?: { command?: string[] };
  httpGet?: { port?: number; path?: string };
  periodSeconds?: number;
  timeoutSeconds?: number;
}

/** The edge's policy of a Sandbox, why it cannot have one, or undefined when it asks for none. */
export function crdAutoPausePolicy(spec: SandboxObject["spec"]): { policy: z.input<typeof AutoPausePolicy> } | { problem: string } | undefined {
  const s = spec as {
    probes?: CrdProbe[];
    autoPausePolicy?: { pause?: { whenProbedIdleState?: { probe: string; messageRegex: string; thresholdDuration: string } }; resume?: { whenProbedScheduleTime?: { probe: string; timeFormat?: string; leadTime?: string } } };
  };
  const idle = s.autoPausePolicy?.pause?.whenProbedIdleState;
  if (!idle) return undefined;
  const named = (name: string) => {
    const p = (s.probes ?? []).find((x) => x.name === name);
    return (
      p && {
        ...(p.exec && { exec: { command: p.exec.command ?? [] } }),
        ...(p.httpGet && { http: { port: p.httpGet.port, path: p.httpGet.path ?? "/" } }),
        ...(p.periodSeconds !== undefined && { periodSeconds: p.periodSeconds }),
        ...(p.timeoutSeconds !== undefined && { timeoutSeconds: p.timeoutSeconds }),
      }
    );
  };
  const probe = named(idle.probe);
  if (!probe) return { problem: `autoPausePolicy names probe "${idle.probe}", which spec.probes does not have` };
  let resume: object | undefined;
  const scheduled = s.autoPausePolicy?.resume?.whenProbedScheduleTime;
  if (s.autoPausePolicy?.resume && !scheduled) return { problem: "autoPausePolicy.resume has no whenProbedScheduleTime" };
  if (scheduled) {
    const by = named(scheduled.probe);
    if (!by) return { problem: `autoPausePolicy.resume names probe "${scheduled.probe}", which spec.probes does not have` };
    resume = { probed: { probe: by, ...(scheduled.timeFormat !== undefined && { timeFormat: scheduled.timeFormat }), ...(scheduled.leadTime !== undefined && { leadTime: scheduled.leadTime }) } };
  }
  const parsed = AutoPausePolicy.safeParse({ probe, messageRegex: idle.messageRegex, thresholdDuration: idle.thresholdDuration, ...(resume && { resume }) });
  if (!parsed.success) return { problem: parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ") };
  return { policy: parsed.data };
}
