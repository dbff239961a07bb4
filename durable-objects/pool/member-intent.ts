import type { TemplateSpec as SandboxSetSpec } from "../../schema/api/template.ts";
import type { Intent, TemplateSpec } from "../../schema/protocol/index.ts";
import type { Member, PoolState } from "./machine.ts";

type Config = NonNullable<PoolState["config"]>;

/** What a sandbox of `templateId` at `revision` runs (the intent's `template`). */
export function protocolTemplate(templateId: string, revision: string, spec: SandboxSetSpec): TemplateSpec {
  return {
    id: templateId,
    revision,
    image: spec.image,
    user: spec.user,
    workdir: spec.workdir,
    resources: { cpuCount: spec.cpuCount, memoryMB: spec.memoryMB, diskSizeMB: spec.diskSizeMB },
    ...(spec.startCmd ? { startCmd: spec.startCmd } : {}),
    ...(spec.readyCmd ? { readyCmd: spec.readyCmd } : {}),
    ...(spec.codeInterpreter ? { codeInterpreter: true } : {}),
    ...(spec.nestedUserNamespaces ? { nestedUserNamespaces: true } : {}),
  };
}

/** The pool's intent for one of its unclaimed members: run it warm, or delete it. */
export function memberIntent(cfg: Config, m: Member, state: "running" | "deleted", now: number): Intent {
  const { spec } = cfg;
  return {
    sandboxId: m.id,
    generation: m.generation,
    owner: { kind: "pool", id: `${cfg.teamId}/${cfg.templateId}` },
    desired: { state, pauseStrategy: spec.pauseStrategy },
    template: protocolTemplate(cfg.templateId, m.revision, spec),
    envVars: spec.env,
    // Warm members get their access token and network policy when claimed (runtime re-init).
    envdAccessToken: null,
    allowInternetAccess: true,
    team: cfg.teamName ?? null,
    labels: { "agents.kruise.io/sandbox-pool": `${cfg.teamId}/${cfg.templateId}`, "agents.kruise.io/sandbox-claimed": "false" },
    annotations: {},
    egress: null,
    networkRules: {},
    issuedAt: now,
  };
}
