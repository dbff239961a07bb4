// SandboxUpdateOps with kubectl against the real apiserver and the real edge: the object is a run
// on the edge (the admin API's machine); created paused it selects and starts nothing, `kubectl
// patch` unpauses it, the kubernetes driver recreates each selected claimed sandbox's pod from the
// SandboxSet's new template (its PVC kept), never more than maxUnavailable at once, an agent
// restarted mid-run changes nothing (each pod replaced once, every line at attempt 1), a Stop-paused
// sandbox in scope is upgraded paused and resumes on the new template, one outside the selector
// keeps its pod, and the object's status (lines, counts, condition) and Events say so.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TestEdge } from "./support/edge.ts";
import { kubectlOk, table, until } from "./support/namespace.ts";
import { startKubeSystem, type KubeSystem } from "./support/system.ts";

let sys: KubeSystem;
let edge: TestEdge;
let ns: string;
let key: string;

const setYaml = (image: string) => `
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxSet
metadata: { name: app }
spec:
  replicas: 1
  template: { spec: { containers: [{ name: sandbox, image: "${image}" }] } }
  volumeClaimTemplates:
    - metadata: { name: work }
      spec: { resources: { requests: { storage: 1Gi } } }
`;
const opsYaml = (paused: boolean) => `
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxUpdateOps
metadata: { name: up }
spec:
  selector: { matchLabels: { ops: "yes" } }
  updateStrategy: { maxUnavailable: 1 }
  paused: ${paused}
  stateFilter: { states: [Running, Paused] }
`;

interface Obj {
  metadata: { name: string; uid: string; deletionTimestamp?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  spec: { template?: { spec: { containers: { image: string }[] } }; containers?: { image: string }[] };
}
interface OpsStatus {
  observedGeneration?: number;
  phase?: string;
  replicas?: number;
  updatedReplicas?: number;
  updatingReplicas?: number;
  failedReplicas?: number;
  conditions?: { type: string; status: string; reason: string; message: string }[];
  sandboxes?: { sandboxID: string; status: string; fromRevision: string; toRevision: string; paused: boolean; attempt: number }[];
}

const get = (kind: string, selector: string) => (JSON.parse(kubectlOk(["-n", ns, "get", kind, "-l", selector, "-o", "json"])).items as Obj[]).filter((o) => !o.metadata.deletionTimestamp);
const podOf = (id: string) => get("pods", `agents.kruise.io/sandbox-id=${id}`)[0];
const sandboxOf = (id: string) => get("sbx", `agents.kruise.io/sandbox-id=${id}`)[0]!;
const pvcOf = (id: string) => get("pvc", `agents.kruise.io/sandbox-id=${id}`)[0];
const opsStatus = (): OpsStatus => (JSON.parse(kubectlOk(["-n", ns, "get", "suo", "up", "-o", "json"])) as { status?: OpsStatus }).status ?? {};
const eventsOf = (name: string) =>
  (JSON.parse(kubectlOk(["-n", ns, "get", "events", "--field-selector", `involvedObject.name=${name}`, "-o", "json"])) as { items: { reason: string; message: string; type: string; involvedObject: { kind: string } }[] }).items;

async function e2b(path: string, body?: object, method = "POST"): Promise<Response> {
  return fetch(`${edge.url}${path}`, { method, headers: { "x-api-key": key, "content-type": "application/json" }, ...(body && { body: JSON.stringify(body) }) });
}

/** The edge's current revision of the SandboxSet's template. */
async function revision(): Promise<string> {
  const res = await fetch(`${edge.url}/admin/teams/${ns}/templates/app`, { headers: { "x-api-key": edge.adminKey } });
  return ((await res.json()) as { revision: string }).revision;
}

beforeAll(async () => {
  sys = await startKubeSystem("updateops", "kube-updateops", { runtimes: true });
  ({ edge, ns } = sys);
  const res = await fetch(`${edge.url}/api-keys`, { method: "POST", headers: { "x-api-key": edge.adminKey, "content-type": "application/json" }, body: JSON.stringify({ name: "ops", teamName: ns }) });
  key = ((await res.json()) as { key: string }).key;
}, 180_000);

afterAll(() => sys?.stop());

describe("SandboxUpdateOps with kubectl", () => {
  it("upgrades the selected claimed sandboxes (new pod, PVC kept) within maxUnavailable, across an agent restart, with status and Events", async () => {
    kubectlOk(["-n", ns, "apply", "-f", "-"], setYaml("python:3.12"));
    await until("the SandboxSet's member", () => table(kubectlOk(["-n", ns, "get", "sbs", "app"]))[0]?.AVAILABLE === "1", 60_000);
    const create = async (ops: string) => {
      const r = await e2b("/sandboxes", { templateID: "app", timeout: 600, metadata: { "label:ops": ops } });
      expect(r.status).toBe(201);
      return ((await r.json()) as { sandboxID: string }).sandboxID;
    };
    const selected = [await create("yes"), await create("yes"), await create("yes")];
    const outside = await create("no");
    const paused = selected[2]!;
    expect((await e2b(`/sandboxes/${paused}/pause`, {})).status).toBe(204);
    await until("the running sandboxes' pods, the paused one's gone", () => [...selected.slice(0, 2), outside].every((id) => podOf(id)) && !podOf(paused), 60_000);
    const before = new Map([...selected, outside].map((id) => [id, { pod: podOf(id)?.metadata.uid, pvc: pvcOf(id)?.metadata.uid }]));
    expect([...before.values()].every((b) => b.pvc)).toBe(true);

    // The template changes; created paused, the run selects its three and starts none.
    const rev1 = await revision();
    kubectlOk(["-n", ns, "apply", "-f", "-"], setYaml("python:3.13"));
    await until("the new revision on the edge", async () => (await revision()) !== rev1, 30_000);
    kubectlOk(["-n", ns, "apply", "-f", "-"], opsYaml(true));
    const held = await until("the paused run selected", () => {
      const s = opsStatus();
      return s.replicas === 3 && s.conditions?.some((c) => c.reason === "Paused") ? s : undefined;
    }, 30_000);
    expect(held).toMatchObject({ phase: "Updating", updatedReplicas: 0, updatingReplicas: 0 });
    expect(held.sandboxes!.map((l) => l.sandboxID).sort()).toEqual([...selected].sort());
    expect(held.sandboxes!.every((l) => l.status === "Pending" && l.fromRevision !== l.toRevision)).toBe(true);
    expect(podOf(selected[0]!)!.metadata.uid).toBe(before.get(selected[0]!)!.pod);

    // Unpaused with kubectl patch; the agent restarts once the first is done.
    let most = 0;
    const sample = () => {
      const s = opsStatus();
      most = Math.max(most, s.updatingReplicas ?? 0);
      return s;
    };
    kubectlOk(["-n", ns, "patch", "suo", "up", "--type", "merge", "-p", '{"spec":{"paused":false}}']);
    await until("one upgraded", () => (sample().updatedReplicas ?? 0) >= 1, 60_000);
    await sys.restart();
    const done = await until("the run completed", () => {
      const s = sample();
      return s.phase === "Completed" ? s : undefined;
    }, 120_000);
    expect(most).toBeLessThanOrEqual(1);
    expect(done).toMatchObject({ replicas: 3, updatedReplicas: 3, failedReplicas: 0, updatingReplicas: 0, observedGeneration: 2 });
    expect(done.conditions).toContainEqual(expect.objectContaining({ type: "Progressing", reason: "Completed" }));
    // Nothing twice: every line at its first attempt, each pod replaced once.
    expect(done.sandboxes!.every((l) => l.status === "Succeeded" && l.attempt === 1)).toBe(true);
    for (const id of selected) {
      const sbx = sandboxOf(id);
      expect(sbx.spec.template!.spec.containers[0]!.image).toBe("python:3.13");
      expect(eventsOf(sbx.metadata.name).filter((e) => e.reason === "Recreated")).toHaveLength(1);
      expect(pvcOf(id)!.metadata.uid).toBe(before.get(id)!.pvc);
    }
    // Nothing skipped: the running ones have new pods of the new template.
    for (const id of selected.slice(0, 2)) {
      await until(`${id}'s new pod`, () => podOf(id)?.metadata.uid !== before.get(id)!.pod && podOf(id), 30_000);
      expect(podOf(id)!.spec.containers![0]!.image).toBe("python:3.13");
    }
    // The paused one stayed paused; resumed, it runs the new template.
    expect(podOf(paused)).toBeUndefined();
    expect((await e2b(`/sandboxes/${paused}/connect`, { timeout: 600 })).status).toBeLessThan(300);
    const resumed = await until("the resumed pod", () => podOf(paused), 60_000);
    expect(resumed.spec.containers![0]!.image).toBe("python:3.13");
    // Outside the selector: untouched.
    expect(podOf(outside)!.metadata.uid).toBe(before.get(outside)!.pod);
    expect(podOf(outside)!.spec.containers![0]!.image).toBe("python:3.12");
    // The run's events are Events on the object, one UpgradeStarted per sandbox.
    const evs = await until("UpgradeSucceeded Events", () => {
      const e = eventsOf("up");
      return e.filter((x) => x.reason === "UpgradeSucceeded").length === 3 ? e : undefined;
    }, 30_000);
    expect(evs.filter((e) => e.reason === "UpgradeStarted")).toHaveLength(3);
    expect(evs[0]!.involvedObject.kind).toBe("SandboxUpdateOps");
  }, 300_000);

  it("spec.patch is refused with an InvalidSpec condition; kubectl delete removes the run from the edge", async () => {
    kubectlOk(["-n", ns, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxUpdateOps\nmetadata: { name: patched }\nspec: { selector: {}, patch: { spec: { containers: [{ name: sandbox, image: x }] } } }\n");
    const c = await until("InvalidSpec", () => (JSON.parse(kubectlOk(["-n", ns, "get", "suo", "patched", "-o", "json"])) as { status?: OpsStatus }).status?.conditions?.find((x) => x.reason === "InvalidSpec"), 20_000);
    expect(c.message).toContain("patch");
    kubectlOk(["-n", ns, "delete", "suo", "up", "patched"]);
    const admin = () => fetch(`${edge.url}/admin/teams/${ns}/updateops/up`, { headers: { "x-api-key": edge.adminKey } });
    await until("the run gone from the edge", async () => (await admin()).status === 404, 20_000);
  });
});
