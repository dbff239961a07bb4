// A SandboxSet rolling update driven with kubectl against the real apiserver and the real edge:
// `kubectl apply` of a changed template rolls the warm members (the edge's PoolDO decides, the
// agent's kubernetes driver acts), never more than updateStrategy.maxUnavailable members replaced
// ahead of their replacements being ready (one that cannot pull its image holds the rollout), an agent restart mid-rollout
// changes nothing, `kubectl get sbs` shows the revisions and counts moving to done, and a sandbox
// claimed before the change keeps its pod.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TestEdge } from "./support/edge.ts";
import { keepDump } from "./support/failure-logs.ts";
import { kubectlOk, table, until } from "./support/namespace.ts";
import { startKubeSystem, type KubeSystem } from "./support/system.ts";

let sys: KubeSystem;
let edge: TestEdge;
let ns: string;

const apply = (image: string) =>
  kubectlOk(["-n", ns, "apply", "-f", "-"], `
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxSet
metadata: { name: roll }
spec:
  replicas: 3
  updateStrategy: { maxUnavailable: 1 }
  template: { spec: { containers: [{ name: sandbox, image: "${image}" }] } }
`);

/** `kubectl get sbs roll` as a row of its printer columns. */
const sbs = () => table(kubectlOk(["-n", ns, "get", "sbs", "roll"]))[0]!;
const done = (row: Record<string, string>) =>
  row.AVAILABLE === "3" && row.UPDATED === "3" && row.UPDATED_AVAILABLE === "3" && row.CURRENT_REVISION === `roll-${row.UPDATE_REVISION}`;

interface Pod {
  metadata: { name: string; uid: string; deletionTimestamp?: string; labels: Record<string, string> };
  status?: { conditions?: { type: string; status: string }[] };
}
const pods = (selector: string) => (JSON.parse(kubectlOk(["-n", ns, "get", "pods", "-l", selector, "-o", "json"])).items as Pod[]).filter((p) => !p.metadata.deletionTimestamp);
const isReady = (p: Pod) => p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") ?? false;
/** Warm pods of one revision, not being deleted. */
const warm = (hash: string) => pods(`agents.kruise.io/sandbox-pool=roll,agents.kruise.io/sandbox-claimed=false,agents.kruise.io/template-hash=${hash}`);
/** Warm pods Ready now, by template hash. */
const readyWarm = () => {
  const by = new Map<string, number>();
  for (const p of pods("agents.kruise.io/sandbox-pool=roll,agents.kruise.io/sandbox-claimed=false")) {
    if (!isReady(p)) continue;
    const h = p.metadata.labels["agents.kruise.io/template-hash"]!;
    by.set(h, (by.get(h) ?? 0) + 1);
  }
  return by;
};
/** The edge's pool status through the admin API. */
const edgePool = async () =>
  ((await (await fetch(`${edge.url}/admin/teams/${ns}/templates/roll`, { headers: { "x-api-key": edge.adminKey } })).json()) as { pool: Record<string, unknown> }).pool;

beforeAll(async () => {
  sys = await startKubeSystem("rollout", "kube-rollout", { runtimes: true });
  ({ edge, ns } = sys);
  keepDump("edge-pool", async () => JSON.stringify(await edgePool(), null, 2));
}, 180_000);

afterAll(() => sys?.stop());

describe("SandboxSet rolling update with kubectl", () => {
  it("kubectl apply of a new template rolls the warm pool within maxUnavailable; kubectl get sbs shows it progressing to done", async () => {
    apply("python:3.12");
    const first = await until("3 members of the first revision", () => (done(sbs()) ? sbs() : undefined), 60_000);
    const rev1 = first.UPDATE_REVISION!;

    // A sandbox claimed through the E2B API before the change.
    const keyRes = await fetch(`${edge.url}/api-keys`, { method: "POST", headers: { "x-api-key": edge.adminKey, "content-type": "application/json" }, body: JSON.stringify({ name: "roll", teamName: ns }) });
    const key = ((await keyRes.json()) as { key: string }).key;
    const created = await fetch(`${edge.url}/sandboxes`, { method: "POST", headers: { "x-api-key": key, "content-type": "application/json" }, body: JSON.stringify({ templateID: "roll", timeout: 600 }) });
    expect(created.status).toBe(201);
    const claimedId = ((await created.json()) as { sandboxID: string }).sandboxID;
    const claimedPod = pods(`agents.kruise.io/sandbox-id=${claimedId}`)[0]!;
    expect(claimedPod.metadata.labels["agents.kruise.io/template-hash"]).toBe(rev1);
    // Refilled, as kubectl and the edge's pool both see it.
    await until("pool refilled", async () => done(sbs()) && (await edgePool()).available === 3, 60_000);

    // A replacement that cannot pull its image stays unready: one old member goes, the other two
    // stay, and the status shows the rollout held at the first revision.
    apply("registry.test/pull-error:1");
    const stuck = await until(
      "rollout in progress",
      () => {
        const row = sbs();
        // REPLICAS 3: the old member's Sandbox is gone, not just its pod.
        return row.UPDATE_REVISION !== rev1 && row.UPDATED === "1" && row.REPLICAS === "3" ? row : undefined;
      },
      60_000,
    );
    expect(stuck).toMatchObject({ DESIRED: "3", UPDATED_AVAILABLE: "0", CURRENT_REVISION: `roll-${rev1}` });
    expect(warm(stuck.UPDATE_REVISION!)).toHaveLength(1);
    expect(warm(rev1)).toHaveLength(2);
    expect(await edgePool()).toMatchObject({ updateRevision: expect.any(String), currentRevision: expect.any(String), updatedReplicas: 1, updatedAvailableReplicas: 0, maxUnavailable: 1 });

    // A fixed template mid-rollout: the unready member of the abandoned revision goes, and each
    // further old member goes only once a replacement was ready (the budget of 1 is the member
    // that could not pull, then each replacement while it starts). The kubelet starts the first
    // replacement only and holds the rest until after the agent's restart: unheld, the whole
    // rollout can finish between two samples, and the restart would not be mid-rollout.
    const started = new Set<string>();
    sys.kubelet.holdWhere = (p) => {
      if (!p.spec?.containers.some((c) => c.image === "python:3.13")) return false;
      if (started.size === 0) started.add(p.metadata!.name!);
      return !started.has(p.metadata!.name!);
    };
    apply("python:3.13");
    const seen = new Set<string>();
    const readyNew = new Set<string>();
    let overBudget = 0;
    /** One sample: replacements seen ready, old members gone beyond them, revisions shown. */
    const sample = () => {
      const row = sbs();
      seen.add(`${row.CURRENT_REVISION}→${row.UPDATE_REVISION}`);
      if (isNew(row)) for (const p of warm(row.UPDATE_REVISION!)) if (isReady(p)) readyNew.add(p.metadata.name);
      overBudget = Math.max(overBudget, 2 - warm(rev1).length - readyNew.size);
      return row;
    };
    const isNew = (row: Record<string, string>) => row.UPDATE_REVISION !== rev1 && row.UPDATE_REVISION !== stuck.UPDATE_REVISION;
    // The agent restarts mid-rollout (one member replaced, two to go); the edge's pool carries on.
    await until("one member replaced", () => {
      const row = sample();
      return isNew(row) && row.UPDATED_AVAILABLE === "1" && row.CURRENT_REVISION === `roll-${rev1}`;
    }, 60_000);
    // Held there: one old member made way for the ready replacement; the second replacement is
    // not ready, so no further one goes, across the restart too.
    await until("an old member gone for the ready replacement", () => warm(rev1).length === 1, 30_000);
    await sys.restart();
    expect(warm(rev1)).toHaveLength(1);
    sys.kubelet.release();
    const end = await until(
      "rollout done",
      () => {
        const row = sample();
        return isNew(row) && done(row) ? row : undefined;
      },
      180_000,
    );
    expect(overBudget).toBe(0);
    expect(seen).toContain(`roll-${rev1}→${end.UPDATE_REVISION}`);
    expect(readyWarm()).toEqual(new Map([[end.UPDATE_REVISION!, 3]]));
    const status = JSON.parse(kubectlOk(["-n", ns, "get", "sbs", "roll", "-o", "json"])).status;
    expect(status).toMatchObject({ replicas: 3, availableReplicas: 3, updatedReplicas: 3, updatedAvailableReplicas: 3, updateRevision: end.UPDATE_REVISION, currentRevision: `roll-${end.UPDATE_REVISION}` });

    // The claimed sandbox's pod was never touched.
    expect(pods(`agents.kruise.io/sandbox-id=${claimedId}`).map((p) => p.metadata.uid)).toEqual([claimedPod.metadata.uid]);
  }, 420_000);
  it("a stale Sandbox status written by someone else (an earlier agent's late write) is corrected from the pod, and kubectl get sbs counts the member again", async () => {
    await until("the pool done", () => done(sbs()), 60_000);
    const sandboxes = JSON.parse(kubectlOk(["-n", ns, "get", "sandboxes", "-l", "agents.kruise.io/sandbox-pool=roll,agents.kruise.io/sandbox-claimed=false", "-o", "json"])).items as { metadata: { name: string }; status: { conditions: { type: string; status: string }[] } }[];
    const victim = sandboxes[0]!.metadata.name;
    const ready = () => {
      const sbx = JSON.parse(kubectlOk(["-n", ns, "get", "sandbox", victim, "-o", "json"]));
      return (sbx.status?.conditions as { type: string; status: string; message?: string }[] | undefined)?.find((c) => c.type === "Ready");
    };
    expect(ready()).toMatchObject({ status: "True" });
    const stale = { status: { conditions: [{ type: "Ready", status: "False", reason: "PodStarting", message: "stale: written by an earlier agent", lastTransitionTime: new Date().toISOString() }] } };
    kubectlOk(["-n", ns, "patch", "sandbox", victim, "--subresource=status", "--type=merge", "-p", JSON.stringify(stale)]);
    const fixed = await until("the Sandbox's Ready condition back from its pod", () => {
      const c = ready();
      return c?.status === "True" ? c : undefined;
    }, 60_000);
    expect(fixed.message ?? "").not.toContain("stale");
    await until("kubectl get sbs counts it available again", () => done(sbs()), 60_000);
  }, 180_000);
});
