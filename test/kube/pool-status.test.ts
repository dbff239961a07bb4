// The SandboxSet's rollout status and revision, pure (no API server): which revision is current
// while old members remain, and which template changes make a new revision on the edge.
import { describe, expect, it } from "vitest";
import { poolSpecOf } from "../../controllers/agent/kube-sync/sandboxset-sync.ts";
import type { SandboxObject, SandboxSetObject } from "../../controllers/drivers/kubernetes/objects.ts";
import { templateHash } from "../../controllers/drivers/kubernetes/pod-spec.ts";
import { poolCounts, poolRevision } from "../../controllers/drivers/kubernetes/pool-status.ts";
import { templateRevision, TemplateSpec } from "../../schema/api/template.ts";

const set = (image: string, extra: Record<string, unknown> = {}): SandboxSetObject =>
  ({ metadata: { name: "s", generation: 1 }, spec: { replicas: 3, template: { spec: { containers: [{ name: "main", image }] } }, ...extra } }) as never;

const member = (hash: string, at: string, ready: boolean, claimed = false): SandboxObject =>
  ({
    metadata: { name: `m-${hash}-${at}`, creationTimestamp: new Date(at), labels: { "agents.kruise.io/sandbox-pool": "s", "agents.kruise.io/sandbox-claimed": String(claimed), "agents.kruise.io/template-hash": hash } },
    spec: {},
    status: { conditions: [{ type: "Ready", status: ready ? "True" : "False" }] },
  }) as never;

describe("poolCounts during a rollout", () => {
  const s = set("python:3.13");
  const rev = poolRevision(s);

  it("reports the oldest old member's revision as current, and counts the updated ones", () => {
    const members = [member("old2", "2026-01-02T00:00:00Z", true), member("old1", "2026-01-01T00:00:00Z", true), member(rev, "2026-01-03T00:00:00Z", false), member("old1", "2025-01-01T00:00:00Z", true, true)];
    expect(poolCounts(s, members)).toMatchObject({ replicas: 3, availableReplicas: 2, updatedReplicas: 1, updatedAvailableReplicas: 0, updateRevision: rev, currentRevision: "s-old1" });
  });

  it("is done when every member runs the update revision (claimed ones are not the pool's)", () => {
    const members = [member(rev, "2026-01-03T00:00:00Z", true), member(rev, "2026-01-04T00:00:00Z", true), member("old1", "2025-01-01T00:00:00Z", true, true)];
    expect(poolCounts(s, members)).toMatchObject({ replicas: 2, updatedReplicas: 2, updatedAvailableReplicas: 2, currentRevision: `s-${rev}` });
  });
});

describe("revisions of a SandboxSet", () => {
  it("a pod template change the edge spec does not map (a command) is a new revision on the edge", () => {
    const a = set("python:3.13");
    const b = set("python:3.13");
    (b.spec.template!.spec!.containers[0] as { command?: string[] }).command = ["sleep", "1"];
    const edgeRev = (x: SandboxSetObject) => templateRevision(TemplateSpec.parse(poolSpecOf(x as never, "c")));
    expect(poolSpecOf(a as never, "c")).toEqual({ ...poolSpecOf(b as never, "c"), sourceRevision: poolRevision(a) });
    expect(edgeRev(a)).not.toBe(edgeRev(b));
  });

  it("runtimes and pauseStrategy count when set; a SandboxSet without them keeps its old revision", () => {
    const plain = set("python:3.13");
    expect(poolRevision(plain)).toBe(templateHash({ template: plain.spec.template, volumeClaimTemplates: [] }));
    expect(poolRevision(set("python:3.13", { runtimes: [{ name: "csi" }] }))).not.toBe(poolRevision(plain));
    expect(poolRevision(set("python:3.13", { pauseStrategy: { type: "Freeze" } }))).not.toBe(poolRevision(plain));
  });
});
