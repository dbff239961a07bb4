// A Sandbox's own lifecycle hooks from kubectl: `spec.lifecycle` reaches the edge (a `requests`
// item, action lifecycle) and runs ahead of the template's: a failing prePause (exec, Fail) keeps
// the sandbox running and E2B's pause answers 409 with the hook's output; hooks the edge cannot
// take (a hook with neither exec nor http) are a Warning Event on the Sandbox and change nothing;
// removing spec.lifecycle with kubectl removes them, and the pause goes through. A Sandbox in
// another namespace carrying the sandbox's id (anyone with a namespace can make one) neither sets
// its hooks nor pauses it: the agent ignores it with a ForeignSandboxId Warning Event.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freshNamespace, kubectlOk, until } from "./support/namespace.ts";
import { withSandboxSet } from "./support/sandbox-set.ts";
import { startKubeSystem, type KubeSystem } from "./support/system.ts";

let sys: KubeSystem;
let key: string;
/** Another team's namespace the agent watches. */
let other: string;

beforeAll(async () => {
  other = await freshNamespace("lifecycle-other");
  sys = await startKubeSystem("lifecycle", "kube-lifecycle", { runtimes: true, agentFlags: { "watch-namespaces": other } });
  await withSandboxSet(sys.ns, "app", { replicas: 1, available: 1 });
  const res = await fetch(`${sys.edge.url}/api-keys`, { method: "POST", headers: { "x-api-key": sys.edge.adminKey, "content-type": "application/json" }, body: JSON.stringify({ name: "lc", teamName: sys.ns }) });
  key = ((await res.json()) as { key: string }).key;
}, 180_000);

afterAll(() => sys?.stop());

const e2b = (path: string, init: { method?: string; body?: unknown } = {}) =>
  fetch(`${sys.edge.url}${path}`, { method: init.method ?? (init.body === undefined ? "GET" : "POST"), headers: { "x-api-key": key, "content-type": "application/json" }, ...(init.body !== undefined && { body: JSON.stringify(init.body) }) });
const state = async (id: string) => ((await (await e2b(`/sandboxes/${id}`)).json()) as { state: string }).state;
const hooks = async (id: string) =>
  ((await (await fetch(`${sys.edge.url}/admin/sandboxes/${id}`, { headers: { "x-api-key": sys.edge.adminKey } })).json()) as { lifecycle: Record<string, unknown> | null }).lifecycle;

describe("a Sandbox's own lifecycle hooks from kubectl", () => {
  it("a failing prePause keeps it running (409 with the hook's output); unusable hooks are a Warning Event; removed, the pause goes through", async () => {
    const created = await e2b("/sandboxes", { body: { templateID: "app", timeout: 600 } });
    expect(created.status).toBe(201);
    const id = ((await created.json()) as { sandboxID: string }).sandboxID;
    await until("running", async () => (await state(id)) === "running", 30_000);
    const name = kubectlOk(["-n", sys.ns, "get", "sbx", "-l", `agents.kruise.io/sandbox-id=${id}`, "-o", "name"]).trim();
    const jsonPatch = (ops: object[]) => kubectlOk(["-n", sys.ns, "patch", name, "--type", "json", "-p", JSON.stringify(ops)]);

    const prePause = { exec: { command: ["sh", "-c", "echo 'busy: a job is running' >&2; exit 3"] }, timeoutSeconds: 20 };
    jsonPatch([{ op: "add", path: "/spec/lifecycle", value: { prePause } }]);
    await until("the hooks on the edge", async () => (await hooks(id))?.prePause !== undefined, 30_000);
    const refused = await e2b(`/sandboxes/${id}/pause`, { body: {} });
    expect(refused.status).toBe(409);
    expect(((await refused.json()) as { message: string }).message).toContain("busy: a job is running");
    expect(await state(id)).toBe("running");

    // A hook with neither exec nor http: said on the Sandbox; the edge keeps what it had.
    jsonPatch([{ op: "replace", path: "/spec/lifecycle", value: { prePause: { timeoutSeconds: 5 } } }]);
    const sbxName = name.replace(/^.*\//, "");
    const warning = await until("a Warning Event on the Sandbox", () => {
      const events = JSON.parse(kubectlOk(["-n", sys.ns, "get", "events", "--field-selector", `involvedObject.name=${sbxName},reason=LifecycleNotApplied`, "-o", "json"])).items as { type: string; message: string }[];
      return events[0];
    }, 30_000);
    expect(warning).toMatchObject({ type: "Warning", message: expect.stringContaining("exactly one of exec and http") });
    expect(await hooks(id)).toMatchObject({ prePause: { exec: prePause.exec } });

    // Removed with kubectl: no hooks of its own, and the pause goes through.
    jsonPatch([{ op: "remove", path: "/spec/lifecycle" }]);
    await until("the hooks gone from the edge", async () => (await hooks(id)) === null, 30_000);
    expect((await e2b(`/sandboxes/${id}/pause`, { body: {} })).status).toBe(204);
    await until("paused", async () => (await state(id)) === "paused", 30_000);
  });

  it("a Sandbox in another namespace with the sandbox's id sets no hooks and does not pause it", async () => {
    const created = await e2b("/sandboxes", { body: { templateID: "app", timeout: 600 } });
    expect(created.status).toBe(201);
    const id = ((await created.json()) as { sandboxID: string }).sandboxID;
    await until("running", async () => (await state(id)) === "running", 30_000);
    const real = JSON.parse(kubectlOk(["-n", sys.ns, "get", "sbx", "-l", `agents.kruise.io/sandbox-id=${id}`, "-o", "json"])).items[0];
    const forged = {
      apiVersion: real.apiVersion,
      kind: "Sandbox",
      metadata: { name: "forged", namespace: other, labels: real.metadata.labels, annotations: { ...real.metadata.annotations, "agents.kruise.io/desired-paused": "false" } },
      spec: { ...real.spec, paused: true, lifecycle: { postResume: { exec: { command: ["id"] } } } },
    };
    kubectlOk(["-n", other, "apply", "-f", "-"], JSON.stringify(forged));
    const warning = () => JSON.parse(kubectlOk(["-n", other, "get", "events", "--field-selector", "involvedObject.name=forged,reason=ForeignSandboxId", "-o", "json"])).items[0] as { type: string; message: string } | undefined;
    // Whichever comes first: the agent's Warning, or (were the object taken as the sandbox's) its hooks on the edge.
    await until("the forged Sandbox handled", async () => warning() ?? (await hooks(id)), 30_000);
    expect(await hooks(id)).toBeNull();
    expect(warning()).toMatchObject({ type: "Warning", message: expect.stringContaining(sys.ns) });
    expect(await state(id)).toBe("running");
    expect(JSON.parse(kubectlOk(["-n", sys.ns, "get", "sbx", real.metadata.name, "-o", "json"])).spec.paused).toBeFalsy();
    kubectlOk(["-n", other, "delete", "sbx", "forged", "--wait=false"]);
  });
});
