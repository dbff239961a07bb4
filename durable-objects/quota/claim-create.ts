// The rest of a create once TeamQuotaDO holds the claim (TeamQuotaDO.create): the claimed member
// goes to its SandboxGroupDO from here, so a warm create is one Durable Object call from the Worker
// (TeamQuotaDO.create → PoolDO.claim, then → SandboxGroupDO.create → ClusterDO.enqueue), not two.
// The reservation is stored under the sandbox's id before the group is asked, as before.
import type { Env } from "../env.ts";
import type { Claimed } from "../pool/rpc.ts";
import type { SandboxInfo } from "../sandbox/info.ts";
import { claimedSpec, type SpecDraft } from "../sandbox/claimed-spec.ts";
import { sandboxGroupStub } from "../sandbox/stub.ts";
import { ErrorCode, type Refusal } from "../../schema/errors.ts";
import { currentTraceparent, edgeSpan } from "../tracing/edge-tracing.ts";

/** What TeamQuotaDO.create makes of the member it claims. */
export interface ClaimCreate {
  /** Everything of the spec but what the claim decides. */
  draft: SpecDraft;
  timeoutS: number;
  /** Bound on waiting for the agent (SandboxGroupDO.create). */
  waitMs: number;
  /** With no warm member, create one (else E2B's capacity refusal). */
  createOnNoStock: boolean;
}

export type ClaimCreateResult =
  | { ok: true; sandbox: SandboxInfo; warm: boolean; claimMs: number }
  | { ok: false; error: Refusal; warm?: boolean; claimMs?: number };

/**
 * Hands a claimed member to its group. A throw of the group's call is an internal error, never the
 * quota's (the reservation stays; the reconcile drops it if the sandbox never came to be).
 */
type Created = { ok: true; sandbox: SandboxInfo } | { ok: false; error: Refusal };

export async function createClaimed(env: Env, claimed: Claimed, req: ClaimCreate & { traceparent?: string }): Promise<Created> {
  const id = claimed.sandboxId;
  const group = sandboxGroupStub(env, id);
  const input = { spec: claimedSpec(req.draft, claimed), timeoutS: req.timeoutS, claimedGeneration: claimed.generation, endpoint: claimed.endpoint, waitMs: req.waitMs };
  try {
    const call = (traceparent?: string): Promise<Created> => group.create(id, traceparent ? { ...input, traceparent } : input) as Promise<Created>;
    return req.traceparent ? await edgeSpan(env, "SandboxGroupDO.create", { "sandbox.id": id }, () => call(currentTraceparent()), req.traceparent) : await call();
  } catch (err) {
    return { ok: false, error: { code: ErrorCode.internal, message: `sandbox group of ${id}: ${String(err)}` } };
  }
}

export function noStock(templateId: string): Refusal {
  return { code: ErrorCode.capacityUnavailable, message: `No warm sandbox of template "${templateId}" is available` };
}
