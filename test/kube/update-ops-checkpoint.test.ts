// SandboxUpdateOps with `updateStrategy.type: CheckpointRestore` through kubectl: before each
// selected sandbox's recreate the edge takes its snapshot, which the kubernetes driver records as a
// Checkpoint for the cluster's checkpoint engine (the test plays the engine, as checkpoints.test.ts
// does); then the pod is recreated on the new template with its PVC kept, naming the checkpoint for
// the engine to restore, and the Checkpoint is deleted once the sandbox runs again. The object's
// lines say each sandbox's memory is not restored, and the run's Events name each checkpoint.
// A recreate cut off before its new pod (pods refused by a quota, then an agent restart) still gets
// a pod naming the checkpoint, and only then is the member done. A Stop-paused member is upgraded
// and stays paused (the run completes); its resume pod names the checkpoint, which is freed after.
// A later Recreate run of such a member carries the pending restore forward (nothing names a
// deleted checkpoint).
// Each step of the run on a sandbox is an Event on its Sandbox too.
import { CustomObjectsApi, PatchStrategy, setHeaderOptions } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { kubeConfig, kubectl, kubectlOk, until } from "./support/namespace.ts";
import { withSandboxSet } from "./support/sandbox-set.ts";
import { startKubeSystem, type KubeSystem } from "./support/system.ts";

let sys: KubeSystem;
let key: string;
let engine: NodeJS.Timeout | undefined;

const opsYaml = `
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxUpdateOps
metadata: { name: ck }
spec:
  selector: { matchLabels: { ops: "yes" } }
  updateStrategy: { type: CheckpointRestore, maxUnavailable: 2 }
`;

interface Obj {
  metadata: { name: string; uid: string; deletionTimestamp?: string; annotations?: Record<string, string> };
  spec?: { template?: { spec: { containers: { image: string }[] } } };
  status?: { phase?: string; checkpointId?: string; conditions?: { type: string; status: string; message?: string }[] };
}
const items = (args: string[]) => (JSON.parse(kubectlOk(["-n", sys.ns, "get", ...args, "-o", "json"])).items as Obj[]).filter((o) => !o.metadata.deletionTimestamp);
const one = (kind: string, id: string) => items([kind, "-l", `agents.kruise.io/sandbox-id=${id}`])[0];

/** The checkpoint engine: every Checkpoint not yet done gets Succeeded with an id. */
async function engineTick(): Promise<void> {
  const custom = kubeConfig().makeApiClient(CustomObjectsApi);
  const target = { group: "agents.kruise.io", version: "v1alpha1", namespace: sys.ns, plural: "checkpoints" };
  for (const cp of ((await custom.listNamespacedCustomObject(target)) as { items: Obj[] }).items) {
    if (cp.status?.phase && cp.status.phase !== "Pending" && cp.status.phase !== "Creating") continue;
    const body = { status: { phase: "Succeeded", checkpointId: `ckpt-${cp.metadata.name}` } };
    await custom.patchNamespacedCustomObjectStatus({ ...target, name: cp.metadata.name, body }, setHeaderOptions("Content-Type", PatchStrategy.MergePatch)).catch(() => {});
  }
}

beforeAll(async () => {
  sys = await startKubeSystem("opsckpt", "kube-opsckpt", { runtimes: true });
  const res = await fetch(`${sys.edge.url}/api-keys`, { method: "POST", headers: { "x-api-key": sys.edge.adminKey, "content-type": "application/json" }, body: JSON.stringify({ name: "ck", teamName: sys.ns }) });
  key = ((await res.json()) as { key: string }).key;
  engine = setInterval(() => void engineTick().catch(() => {}), 200);
}, 180_000);

afterAll(async () => {
  clearInterval(engine);
  await sys?.stop();
});

describe("SandboxUpdateOps CheckpointRestore with kubectl", () => {
  it("records a Checkpoint of each selected sandbox before its recreate, names it on the new pod for the engine to restore, deletes it after; the PVC is kept, the lines say memory is not restored", async () => {
    await withSandboxSet(sys.ns, "app", { volume: true, available: 1 });
    const create = async () => {
      const r = await fetch(`${sys.edge.url}/sandboxes`, { method: "POST", headers: { "x-api-key": key, "content-type": "application/json" }, body: JSON.stringify({ templateID: "app", timeout: 600, metadata: { "label:ops": "yes" } }) });
      expect(r.status).toBe(201);
      return ((await r.json()) as { sandboxID: string }).sandboxID;
    };
    const ids = [await create(), await create()];
    await until("their pods", () => ids.every((id) => one("pods", id)), 60_000);
    const before = new Map(ids.map((id) => [id, { pod: one("pods", id)!.metadata.uid, pvc: one("pvc", id)!.metadata.uid }]));

    const revision = async () => ((await (await fetch(`${sys.edge.url}/admin/teams/${sys.ns}/templates/app`, { headers: { "x-api-key": sys.edge.adminKey } })).json()) as { revision: string }).revision;
    const rev1 = await revision();
    await withSandboxSet(sys.ns, "app", { volume: true, image: "python:3.13" });
    await until("the new revision on the edge", async () => (await revision()) !== rev1, 30_000);
    kubectlOk(["-n", sys.ns, "apply", "-f", "-"], opsYaml);
    const done = await until("the run completed", () => {
      const s = (JSON.parse(kubectlOk(["-n", sys.ns, "get", "suo", "ck", "-o", "json"])) as { status?: { phase?: string; updatedReplicas?: number; sandboxes?: { sandboxID: string; status: string; message?: string }[] } }).status;
      return s?.phase === "Completed" || s?.phase === "Failed" ? s : undefined;
    }, 120_000);
    expect(done, JSON.stringify(done)).toMatchObject({ phase: "Completed", updatedReplicas: 2 });
    for (const id of ids) {
      expect(done.sandboxes!.find((l) => l.sandboxID === id)).toMatchObject({ status: "Succeeded", message: expect.stringContaining("memory not restored") });
      // A new pod on the new template that names the engine's checkpoint to restore, the PVC kept.
      const sbx = one("sbx", id)!;
      expect(sbx.spec!.template!.spec.containers[0]!.image).toBe("python:3.13");
      await until(`${id}'s new pod`, () => one("pods", id) && one("pods", id)!.metadata.uid !== before.get(id)!.pod, 60_000);
      expect(one("pods", id)!.metadata.annotations?.["agents.kruise.io/restore-checkpoint-id"]).toMatch(/^ckpt-snap-/);
      expect(one("pvc", id)!.metadata.uid).toBe(before.get(id)!.pvc);
      // Restored, its Checkpoint is deleted: none is left behind.
      await until(`${id}'s Checkpoint deleted`, () => !items(["checkpoints"]).some((c) => c.metadata.annotations?.["agents.kruise.io/sandbox-id"] === id) || undefined, 60_000);
    }
    const events = (JSON.parse(kubectlOk(["-n", sys.ns, "get", "events", "--field-selector", "involvedObject.name=ck,reason=CheckpointTaken", "-o", "json"])) as { items: unknown[] }).items;
    expect(events).toHaveLength(2);
    // Each step of the run on a sandbox is also an Event on its Sandbox: kubectl describe lists them.
    for (const id of ids) {
      const name = one("sbx", id)!.metadata.name;
      const described = await until(`${name}'s run steps`, () => {
        const out = kubectlOk(["-n", sys.ns, "describe", "sbx", name]);
        return ["CheckpointTaken", "UpgradeStarted", "UpgradeSucceeded", "CheckpointDeleted"].every((r) => out.includes(r)) ? out : undefined;
      }, 30_000);
      expect(described).toContain("SandboxUpdateOps ck: ");
    }
  }, 300_000);

  it("a recreate cut off before its new pod (pods refused, then an agent restart) still restores: the Sandbox marks the restore pending, the pod made after the restart names the checkpoint, and only then is the run done", async () => {
    await withSandboxSet(sys.ns, "rs", { available: 1 });
    const id = await createIn("rs", "restart");
    await until("its pod", () => one("pods", id), 60_000);
    kubectlOk(["-n", sys.ns, "apply", "-f", "-"], `apiVersion: v1\nkind: ResourceQuota\nmetadata: { name: no-pods }\nspec: { hard: { pods: "0" } }\n`);
    // No controller-manager here: the test writes the quota's status as its controller would.
    kubectlOk(["-n", sys.ns, "patch", "resourcequota", "no-pods", "--subresource=status", "--type=merge", "-p", '{"status":{"hard":{"pods":"0"},"used":{"pods":"0"}}}']);
    try {
      await newRevision("rs");
      kubectlOk(["-n", sys.ns, "apply", "-f", "-"], runYaml("rs", "restart"));
      // The window: the old pod is gone, the Sandbox has the new template, no pod can be made.
      await until("the Sandbox retemplated without a pod", () => one("sbx", id)?.spec?.template?.spec.containers[0]!.image === "python:3.13" && !one("pods", id), 60_000);
      expect(line("rs", id)?.status).not.toBe("Succeeded");
      await sys.restart(() => kubectlOk(["-n", sys.ns, "delete", "resourcequota", "no-pods"]));
    } finally {
      kubectl(["-n", sys.ns, "delete", "resourcequota", "no-pods", "--ignore-not-found"]);
    }
    const done = await completed("rs");
    expect(done, JSON.stringify(done)).toMatchObject({ phase: "Completed", updatedReplicas: 1 });
    expect(line("rs", id)).toMatchObject({ status: "Succeeded", message: expect.stringContaining("files restored") });
    expect(one("pods", id)!.metadata.annotations?.[RESTORE]).toMatch(/^ckpt-snap-/);
    expect(one("sbx", id)!.metadata.annotations?.[PENDING]).toBeUndefined();
    await until(`${id}'s Checkpoint deleted`, () => !checkpointOf(id) || undefined, 60_000);
  }, 300_000);

  it("a Stop-paused member is upgraded and stays paused: the run completes with the restore pending on the Sandbox (condition RestorePending) and the checkpoint kept; its resume pod names the checkpoint, which is deleted after", async () => {
    const { id, done } = await checkpointStopPaused("ps", "paused");
    expect(done, JSON.stringify(done)).toMatchObject({ phase: "Completed", updatedReplicas: 1 });
    expect(line("ps", id)).toMatchObject({ status: "Succeeded", message: expect.stringContaining("when it resumes") });
    // Upgraded and still paused: the new template, no pod, the restore pending, the checkpoint kept.
    const sbx = one("sbx", id)!;
    const pending = sbx.metadata.annotations?.[PENDING];
    expect(pending).toMatch(/^ckpt-snap-/);
    expect(sbx.spec!.template!.spec.containers[0]!.image).toBe("python:3.13");
    expect(one("pods", id)).toBeUndefined();
    const shown = await until("the Sandbox shown paused with RestorePending", () => {
      const st = one("sbx", id)!.status;
      return st?.phase === "Paused" && st.conditions?.some((c) => c.type === "RestorePending" && c.status === "True") ? st : undefined;
    }, 30_000);
    expect(shown.conditions!.find((c) => c.type === "RestorePending")!.message).toContain(pending);
    const info = (await (await fetch(`${sys.edge.url}/sandboxes/${id}`, { headers: { "x-api-key": key } })).json()) as { state: string };
    expect(info.state).toBe("paused");
    expect(checkpointOf(id)).toBeDefined();
    await until("the CheckpointKept Event on the Sandbox", () => kubectlOk(["-n", sys.ns, "describe", "sbx", sbx.metadata.name]).includes("CheckpointKept") || undefined, 30_000);
    // Resume gives the new version, restored from the checkpoint; then the checkpoint is freed.
    expect((await e2b(`/sandboxes/${id}/connect`, { timeout: 600 })).status).toBeLessThan(300);
    await until("its resume pod", () => one("pods", id), 60_000);
    expect(one("pods", id)!.metadata.annotations?.[RESTORE]).toBe(pending);
    await until("the pending mark and condition cleared", () => {
      const s = one("sbx", id)!;
      return !s.metadata.annotations?.[PENDING] && !s.status?.conditions?.some((c) => c.type === "RestorePending") ? s : undefined;
    }, 60_000);
    await until(`${id}'s Checkpoint deleted`, () => !checkpointOf(id) || undefined, 60_000);
  }, 300_000);

  it("a Recreate run of a Stop-paused member whose CheckpointRestore restore is still pending carries the restore forward: the Sandbox gets the newer template, its mark still names the checkpoint, which is kept; the resume pod names it, then it is deleted", async () => {
    const first = await checkpointStopPaused("cf", "carry");
    const id = first.id;
    expect(first.done).toMatchObject({ phase: "Completed", updatedReplicas: 1 });
    const pending = one("sbx", id)!.metadata.annotations?.[PENDING];
    expect(pending).toMatch(/^ckpt-snap-/);

    // A newer revision, rolled out by a Recreate run while the member is still paused.
    await newRevision("cf", "python:3.14");
    kubectlOk(["-n", sys.ns, "apply", "-f", "-"], runYaml("cf-re", "carry").replace("CheckpointRestore", "Recreate"));
    const re = await completed("cf-re");
    expect(re, JSON.stringify(re)).toMatchObject({ phase: "Completed", updatedReplicas: 1 });
    const sbx = one("sbx", id)!;
    expect(sbx.spec!.template!.spec.containers[0]!.image).toBe("python:3.14");
    expect(sbx.metadata.annotations?.[PENDING]).toBe(pending);
    expect(one("pods", id)).toBeUndefined();
    // The checkpoint the mark names is still there (the first run's holder asked, and was told it
    // is still needed: before, it was deleted here), and the Sandbox still says the restore is pending.
    expect(checkpointOf(id)).toBeDefined();
    expect(line("cf-re", id)).toMatchObject({ status: "Succeeded", message: expect.stringContaining("carried forward") });
    await until("the Sandbox shown paused with RestorePending at the new template", () => {
      const st = one("sbx", id)!.status;
      return st?.phase === "Paused" && st.conditions?.some((c) => c.type === "RestorePending" && c.status === "True") ? st : undefined;
    }, 30_000);
    expect(checkpointOf(id)).toBeDefined();
    // Resume: the pod is on the newest template and names the kept checkpoint; then it is freed.
    expect((await e2b(`/sandboxes/${id}/connect`, { timeout: 600 })).status).toBeLessThan(300);
    await until("its resume pod", () => one("pods", id), 60_000);
    expect(one("pods", id)!.metadata.annotations?.[RESTORE]).toBe(pending);
    await until("the pending mark cleared", () => !one("sbx", id)!.metadata.annotations?.[PENDING] || undefined, 60_000);
    await until(`${id}'s Checkpoint deleted`, () => !checkpointOf(id) || undefined, 60_000);
  }, 300_000);
});

const RESTORE = "agents.kruise.io/restore-checkpoint-id";
const PENDING = "agents.kruise.io/restore-pending-checkpoint-id";
const e2b = (path: string, body: unknown) => fetch(`${sys.edge.url}${path}`, { method: "POST", headers: { "x-api-key": key, "content-type": "application/json" }, body: JSON.stringify(body) });
async function createIn(template: string, label: string): Promise<string> {
  const r = await e2b("/sandboxes", { templateID: template, timeout: 600, metadata: { [`label:${label}`]: "yes" } });
  expect(r.status).toBe(201);
  return ((await r.json()) as { sandboxID: string }).sandboxID;
}
/** Moves SandboxSet `name` to `image` and waits until the edge has the new revision. */
async function newRevision(name: string, image = "python:3.13"): Promise<void> {
  const revision = async () => ((await (await fetch(`${sys.edge.url}/admin/teams/${sys.ns}/templates/${name}`, { headers: { "x-api-key": sys.edge.adminKey } })).json()) as { revision: string }).revision;
  const before = await revision();
  await withSandboxSet(sys.ns, name, { image });
  await until("the new revision on the edge", async () => (await revision()) !== before, 30_000);
}
/** A sandbox of a new SandboxSet `set` (labelled `label`), Stop-paused, then a CheckpointRestore
 * run `set` over it to a new revision, until the run ends. */
async function checkpointStopPaused(set: string, label: string): Promise<{ id: string; done: RunStatus }> {
  await withSandboxSet(sys.ns, set, { available: 1 });
  const id = await createIn(set, label);
  await until("its pod", () => one("pods", id), 60_000);
  expect((await e2b(`/sandboxes/${id}/pause`, {})).status).toBe(204);
  await until("its pod gone", () => !one("pods", id), 60_000);
  await newRevision(set);
  kubectlOk(["-n", sys.ns, "apply", "-f", "-"], runYaml(set, label));
  return { id, done: await completed(set) };
}
const runYaml = (name: string, label: string) =>
  `apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxUpdateOps\nmetadata: { name: ${name} }\nspec:\n  selector: { matchLabels: { ${label}: "yes" } }\n  stateFilter: { states: [Running, Paused] }\n  updateStrategy: { type: CheckpointRestore, maxUnavailable: 1 }\n`;
interface RunStatus { phase?: string; updatedReplicas?: number; sandboxes?: { sandboxID: string; status: string; message?: string }[] }
const status = (name: string) => (JSON.parse(kubectlOk(["-n", sys.ns, "get", "suo", name, "-o", "json"])) as { status?: RunStatus }).status;
const line = (name: string, id: string) => status(name)?.sandboxes?.find((l) => l.sandboxID === id);
const completed = (name: string) => until(`run ${name} completed`, () => { const s = status(name); return s?.phase === "Completed" || s?.phase === "Failed" ? s : undefined; }, 120_000);
const checkpointOf = (id: string) => items(["checkpoints"]).find((c) => c.metadata.annotations?.["agents.kruise.io/sandbox-id"] === id);
