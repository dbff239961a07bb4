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
import { leafSpan } from "../tracing/edge-tracing.ts";

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
 * What came of handing the claimed member to its group. A failure says whether the sandbox exists:
 * `false` when the group was never reached or does not know it (nothing was created, so the
 * reservation and the member can go), `null` when that cannot be told (the reservation stays for
 * the reconcile, which asks the group again).
 */
export type Created = { ok: true; sandbox: SandboxInfo } | { ok: false; error: Refusal; exists?: boolean | null };

/** Hands a claimed member to its group; never throws (a throw is an internal error, not the quota's). */
export async function createClaimed(env: Env, claimed: Claimed, req: ClaimCreate & { traceparent?: string }): Promise<Created> {
  const id = claimed.sandboxId;
  let asked = false;
  try {
    const group = sandboxGroupStub(env, id);
    const input = { spec: claimedSpec(req.draft, claimed), timeoutS: req.timeoutS, claimedGeneration: claimed.generation, endpoint: claimed.endpoint, waitMs: req.waitMs };
    const call = (traceparent?: string): Promise<Created> => {
      asked = true;
      return group.create(id, traceparent ? { ...input, traceparent } : input) as Promise<Created>;
    };
    return req.traceparent ? await leafSpan(env, "SandboxGroupDO.create", { "sandbox.id": id }, (traceparent) => call(traceparent()), req.traceparent) : await call();
  } catch (err) {
    const exists = asked ? await groupKnows(env, id) : false;
    return { ok: false, error: afterClaim(id, String(err), exists), exists };
  }
}

/** Whether the sandbox's group holds it (null when the group cannot be asked). */
async function groupKnows(env: Env, id: string): Promise<boolean | null> {
  try {
    return (await sandboxGroupStub(env, id).quotaHeld([id]))[id]?.known ?? null;
  } catch {
    return null;
  }
}

/** A create that failed after its claim: an internal error saying what exists, never a refusal. */
export function afterClaim(id: string, why: string, exists: boolean | null): Refusal {
  const state =
    exists === false
      ? "it was not created; its quota reservation and its warm member are released"
      : exists
        ? `it exists; GET /sandboxes/${id} shows its state`
        : `whether it exists is unknown; GET /sandboxes/${id} shows it if it does`;
  return { code: ErrorCode.internal, message: `Sandbox "${id}" was claimed but its create failed (${why}): ${state}` };
}

export function noStock(templateId: string): Refusal {
  return { code: ErrorCode.capacityUnavailable, message: `No warm sandbox of template "${templateId}" is available` };
}
