// A create's sandbox spec in two halves: the draft the create route knows before the claim (the
// caller, the body, the template's resources, fresh tokens) and what the claim decides (the
// member's id and cluster, the pool's template, pause strategy and env). The create operation
// drafts; whoever holds the claim (TeamQuotaDO.create, or the operation itself for a snapshot)
// completes it. Pure.
import type { Claimed } from "../pool/rpc.ts";
import type { SandboxSpec } from "./state.ts";

export type SpecDraft = Omit<SandboxSpec, "id" | "cluster" | "template" | "pauseStrategy">;

/** The spec of the claimed member; the create's env vars override the template's. */
export function claimedSpec(draft: SpecDraft, claimed: Claimed): SandboxSpec {
  return {
    ...draft,
    id: claimed.sandboxId,
    cluster: claimed.cluster,
    template: claimed.template,
    pauseStrategy: claimed.pauseStrategy,
    envVars: { ...claimed.envVars, ...draft.envVars },
  };
}
