// A Sandbox's `spec.probes` + `spec.autoPausePolicy` (OpenKruise Agents §1.1.3, set with kubectl)
// as the edge's auto-pause policy (schema/api/auto-pause.ts), pure: the probe the policy's
// `pause.whenProbedIdleState.probe` names, with its `exec.command` or `httpGet {port, path}`,
// `periodSeconds` and `timeoutSeconds`. The edge runs it (ProbeDO), as for an E2B create's
// auto-pause-policy extension. `resume.whenProbedScheduleTime` (a wake time read from a probe's
// output) has no equivalent here and is refused.
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
  const s = spec as { probes?: CrdProbe[]; autoPausePolicy?: { pause?: { whenProbedIdleState?: { probe: string; messageRegex: string; thresholdDuration: string } }; resume?: unknown } };
  const idle = s.autoPausePolicy?.pause?.whenProbedIdleState;
  if (!idle) return undefined;
  if (s.autoPausePolicy?.resume) return { problem: "autoPausePolicy.resume.whenProbedScheduleTime is not supported" };
  const p = (s.probes ?? []).find((x) => x.name === idle.probe);
  if (!p) return { problem: `autoPausePolicy names probe "${idle.probe}", which spec.probes does not have` };
  const probe = {
    ...(p.exec && { exec: { command: p.exec.command ?? [] } }),
    ...(p.httpGet && { http: { port: p.httpGet.port, path: p.httpGet.path ?? "/" } }),
    ...(p.periodSeconds !== undefined && { periodSeconds: p.periodSeconds }),
    ...(p.timeoutSeconds !== undefined && { timeoutSeconds: p.timeoutSeconds }),
  };
  const parsed = AutoPausePolicy.safeParse({ probe, messageRegex: idle.messageRegex, thresholdDuration: idle.thresholdDuration });
  if (!parsed.success) return { problem: parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ") };
  return { policy: parsed.data };
}
