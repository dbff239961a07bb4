// The observation router, step by step: which sandbox observations ClusterDO sends to their
// groups after awaited acks (a repeat of an applied ack is held back, each confirmation used once).
import { describe, expect, it } from "vitest";
import { ObservationRouter } from "../../../../durable-objects/cluster/observation-router.ts";
import { IntentSchema, type AckItem, type Endpoint, type Intent, type Observation, type SandboxId } from "../../../../schema/protocol/index.ts";

const EP: Endpoint = { runtime: "http://10.0.0.1:49983" };
const MOVED: Endpoint = { runtime: "http://10.0.0.2:49983" };
const KNOWN = JSON.stringify(EP);

function ack(id: string, generation: number, result: AckItem["result"] = "applied"): AckItem {
  return { seq: 1, sandboxId: id as SandboxId, generation, result };
}

function obs(id: string, generation: number, over: Partial<Observation> = {}): Observation {
  return { sandboxId: id as SandboxId, generation, phase: "Running", ready: true, endpoint: EP, observedAt: 1, ...over };
}

function intent(id: string, generation: number): Intent {
  return IntentSchema.parse({ sandboxId: id, generation, owner: { kind: "sandbox" }, desired: { state: "running" }, template: { id: "base", revision: "r1" }, issuedAt: 1 });
}

type Step =
  | { watch: string[] }
  | { unwatch: string[] }
  | { ack: AckItem; running?: boolean }
  | { observe: Observation[]; routed: string[] }
  | { resent: Intent[]; seqs: number[]; routed: string[] }
  | { reset: true };

interface Row {
  name: string;
  steps: Step[];
  max?: number;
}

const A = "a";
const B = "b";
const rows: Row[] = [
  { name: "an observation without a confirmation is routed", steps: [{ observe: [obs(A, 2)], routed: ["a@2"] }] },
  { name: "the repeat of an awaited applied ack is not routed", steps: [{ watch: [A] }, { ack: ack(A, 2) }, { unwatch: [A] }, { observe: [obs(A, 2)], routed: [] }] },
  { name: "a confirmation is used once: the next observation is routed", steps: [{ watch: [A] }, { ack: ack(A, 2) }, { unwatch: [A] }, { observe: [obs(A, 2)], routed: [] }, { observe: [obs(A, 2)], routed: ["a@2"] }] },
  { name: "an ack nobody watches confirms nothing", steps: [{ ack: ack(A, 2) }, { observe: [obs(A, 2)], routed: ["a@2"] }] },
  { name: "an accepted (not applied) ack confirms nothing", steps: [{ watch: [A] }, { ack: ack(A, 2, "accepted") }, { observe: [obs(A, 2)], routed: ["a@2"] }] },
  { name: "an ack of a sandbox no longer wanted running confirms nothing", steps: [{ watch: [A] }, { ack: ack(A, 2), running: false }, { observe: [obs(A, 2)], routed: ["a@2"] }] },
  { name: "an observation routed while the enqueue waited voids the confirmation (the endpoint may have moved and come back)", steps: [{ watch: [A] }, { observe: [obs(A, 1, { endpoint: MOVED })], routed: ["a@1"] }, { ack: ack(A, 2) }, { observe: [obs(A, 2)], routed: ["a@2"] }] },
  { name: "another sandbox's observation does not void it", steps: [{ watch: [A] }, { observe: [obs(B, 1)], routed: ["b@1"] }, { ack: ack(A, 2) }, { observe: [obs(A, 2)], routed: [] }] },
  { name: "a different endpoint is routed", steps: [{ watch: [A] }, { ack: ack(A, 2) }, { observe: [obs(A, 2, { endpoint: MOVED })], routed: ["a@2"] }] },
  { name: "one with conditions is routed (the driver's own say more than the ack: a holder restarted under the seccomp filter)", steps: [{ watch: [A] }, { ack: ack(A, 2) }, { unwatch: [A] }, { observe: [obs(A, 2, { conditions: [{ type: "SeccompFiltered", status: "True", reason: "HolderRestarted" }] })], routed: ["a@2"] }] },
  { name: "not ready is routed", steps: [{ watch: [A] }, { ack: ack(A, 2) }, { observe: [obs(A, 2, { ready: false })], routed: ["a@2"] }] },
  { name: "another phase is routed", steps: [{ watch: [A] }, { ack: ack(A, 2) }, { observe: [obs(A, 2, { phase: "Failed", ready: false })], routed: ["a@2"] }] },
  { name: "an older generation is routed and keeps the confirmation", steps: [{ watch: [A] }, { ack: ack(A, 2) }, { observe: [obs(A, 1), obs(A, 2)], routed: ["a@1"] }] },
  { name: "a newer generation is routed and uses the confirmation up", steps: [{ watch: [A] }, { ack: ack(A, 2) }, { observe: [obs(A, 3), obs(A, 2)], routed: ["a@3", "a@2"] }] },
  { name: "a re-sent intent (seq 0) gets the held observation", steps: [{ watch: [A] }, { ack: ack(A, 2) }, { observe: [obs(A, 2)], routed: [] }, { resent: [intent(A, 2)], seqs: [0], routed: ["a@2"] }, { resent: [intent(A, 2)], seqs: [0], routed: [] }] },
  { name: "a newly queued intent (seq > 0) does not take the held observation", steps: [{ watch: [A] }, { ack: ack(A, 2) }, { observe: [obs(A, 2)], routed: [] }, { resent: [intent(A, 2)], seqs: [7], routed: [] }] },
  { name: "a re-sent newer generation does not take an older held observation", steps: [{ watch: [A] }, { ack: ack(A, 2) }, { observe: [obs(A, 2)], routed: [] }, { resent: [intent(A, 3)], seqs: [0], routed: [] }] },
  { name: "a later routed observation drops the held one", steps: [{ watch: [A] }, { ack: ack(A, 2) }, { observe: [obs(A, 2)], routed: [] }, { observe: [obs(A, 2, { ready: false })], routed: ["a@2"] }, { resent: [intent(A, 2)], seqs: [0], routed: [] }] },
  { name: "reset forgets the confirmations", steps: [{ watch: [A] }, { ack: ack(A, 2) }, { reset: true }, { observe: [obs(A, 2)], routed: ["a@2"] }] },
  { name: "confirmations are bounded: a full map starts over", max: 1, steps: [{ watch: [A, B] }, { ack: ack(A, 2) }, { ack: ack(B, 2) }, { observe: [obs(A, 2), obs(B, 2)], routed: ["a@2"] }] },
];

describe("cluster observation router", () => {
  it.each(rows)("$name", (row) => {
    const r = new ObservationRouter(row.max);
    const names = (os: Observation[]) => os.map((o) => `${o.sandboxId}@${o.generation}`);
    for (const step of row.steps) {
      if ("watch" in step) r.watch(step.watch);
      else if ("unwatch" in step) r.unwatch(step.unwatch);
      else if ("ack" in step) r.acked(step.ack, KNOWN, step.running ?? true);
      else if ("observe" in step) expect(names(r.route(step.observe))).toEqual(step.routed);
      else if ("resent" in step) expect(names(r.resent(step.resent, step.seqs))).toEqual(step.routed);
      else r.reset();
    }
  });
});
