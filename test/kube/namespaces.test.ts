// Several team namespaces (team = namespace) against the real edge and API server: with
// `--watch-namespaces A,B` the SandboxSets and SandboxClaims of A and B sync (each its team's),
// with `--all-namespaces` a namespace whose first SandboxSet is applied while the agent runs is
// found, and one of a team not bound to the agent's cluster changes nothing of the team; and a restarted driver watches the namespaces holding its Sandboxes from start() on, so a
// Sandbox whose intent the agent lost is still seen (and can be cleaned up) in a team namespace.
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { KubernetesDriver, type KubeDesiredSandbox } from "../../controllers/drivers/kubernetes/kubernetes-driver.ts";
import { startTestEdge, type TestEdge } from "./support/edge.ts";
import { startKubeAgent, type KubeAgent } from "./support/kube-agent.ts";
import { freshNamespace, kubeConfig, kubectlOk, until } from "./support/namespace.ts";
import { withSandboxSet } from "./support/sandbox-set.ts";

let edge: TestEdge;
let home: string;
let teamA: string;
let teamB: string;
let k: KubeAgent | undefined;

async function edgeTemplate(team: string, id: string): Promise<{ spec: Record<string, unknown> } | undefined> {
  const res = await fetch(`${edge.url}/admin/teams/${team}/templates/${id}`, { headers: { "x-api-key": edge.adminKey } });
  if (res.status === 404) return undefined;
  if (!res.ok) throw new Error(`edge: ${res.status} ${await res.text()}`);
  return (await res.json()) as { spec: Record<string, unknown> };
}

const claimPhase = (ns: string, name: string) => JSON.parse(kubectlOk(["-n", ns, "get", "sbc", name, "-o", "json"])).status as { phase?: string; conditions?: { reason: string }[] } | undefined;

beforeAll(async () => {
  edge = await startTestEdge("namespaces");
  [home, teamA, teamB] = [await freshNamespace("home"), await freshNamespace("team-a"), await freshNamespace("team-b")];
}, 120_000);

// A case that fails before its own stop leaves no agent running (nor its data dir locked) for the
// next, which starts one on the same data dir.
afterEach(async () => {
  await k?.stop().catch(() => {});
  k = undefined;
});

afterAll(async () => {
  await k?.stop().catch(() => {});
  await edge?.stop();
});

describe("the CRD syncs over several namespaces", () => {
  it("--watch-namespaces A,B: SandboxSets of A and B are teams A's and B's templates, their pools pods in A and B, their claims answered", async () => {
    k = await startKubeAgent(edge, home, "kube-ns", undefined, { "watch-namespaces": `${teamA},${teamB}` });
    await withSandboxSet(teamA, "alpha");
    await withSandboxSet(teamB, "beta");
    await until("alpha on the edge as team A's", () => edgeTemplate(teamA, "alpha"), 20_000);
    await until("beta on the edge as team B's", () => edgeTemplate(teamB, "beta"), 20_000);
    expect(await edgeTemplate(teamB, "alpha")).toBeUndefined();
    for (const [ns, pool] of [[teamA, "alpha"], [teamB, "beta"]] as const) {
      await until(`a pool pod in ${ns}`, () => kubectlOk(["-n", ns, "get", "pods", "-l", `agents.kruise.io/sandbox-pool=${pool}`, "-o", "name"]).trim() !== "", 30_000);
    }
    // A claim in B is B's: B has no SandboxSet "alpha" (A has), so it completes with SandboxSetNotFound.
    kubectlOk(["-n", teamB, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxClaim\nmetadata: { name: wrong-team }\nspec: { templateName: alpha }\n");
    const st = await until("claim in B answered", () => (claimPhase(teamB, "wrong-team")?.phase === "Completed" ? claimPhase(teamB, "wrong-team") : undefined), 30_000);
    expect(st!.conditions).toContainEqual(expect.objectContaining({ reason: "SandboxSetNotFound" }));
    await k.stop();
    k = undefined;
  });

  it("--all-namespaces: a namespace whose first SandboxSet comes while the agent runs is synced", async () => {
    k = await startKubeAgent(edge, home, "kube-ns", undefined, { "all-namespaces": true });
    const late = await freshNamespace("team-late");
    await edge.bind(late, "kube-ns");
    await withSandboxSet(late, "gamma");
    await until("gamma on the edge as the new team's", () => edgeTemplate(late, "gamma"), 20_000);
    await until(`a pool pod in ${late}`, () => kubectlOk(["-n", late, "get", "pods", "-l", "agents.kruise.io/sandbox-pool=gamma", "-o", "name"]).trim() !== "", 30_000);
    // The namespaces named before are still synced too.
    await withSandboxSet(teamA, "delta");
    await until("delta on the edge as team A's", () => edgeTemplate(teamA, "delta"), 20_000);
    await k.stop();
    k = undefined;
  });

  it("--all-namespaces: the namespace of a team not bound to the cluster changes nothing of the team (its SandboxSet makes no template, its quota is refused with a Warning Event naming the admin call) until the admin binds it", async () => {
    k = await startKubeAgent(edge, home, "kube-ns", undefined, { "all-namespaces": true });
    try {
      // Team `other` exists on the edge and runs on another cluster; this cluster merely has a
      // namespace of that name.
      const other = await freshNamespace("team-other");
      await edge.bind(other, "kube-elsewhere");
      const P = "quota.agents.kruise.io";
      kubectlOk(["annotate", "ns", other, `${P}/running-sandboxes=1000`]);
      await withSandboxSet(other, "grab");
      const refused = () => kubectlOk(["-n", other, "get", "events", "--field-selector", "reason=SandboxQuotaRefused", "-o", "jsonpath={.items[*].message}"]);
      await until("SandboxQuotaRefused event", () => refused().includes(`PUT /admin/teams/${other}/clusters/kube-ns`), 30_000);
      await until("the SandboxSet refused", () => k!.logs.some((l) => l.includes(`edge refused SandboxSet ${other}/grab: forbidden`)), 30_000);
      expect(await edgeTemplate(other, "grab")).toBeUndefined();
      const quota = await fetch(`${edge.url}/admin/teams/${other}/quota`, { headers: { "x-api-key": edge.adminKey } });
      expect(((await quota.json()) as { overrides: object }).overrides).toEqual({});
      // Bound: the retried SandboxSet becomes the team's template on this cluster.
      await edge.bind(other, "kube-ns");
      expect((await until("grab on the edge once bound", () => edgeTemplate(other, "grab"), 30_000)).spec).toMatchObject({ cluster: "kube-ns" });
    } finally {
      // Stopped even on a failure: a later test restarts a driver in the same namespaces.
      await k.stop();
      k = undefined;
    }
  });
});

describe("a restarted driver watches its teams' namespaces from start()", () => {
  const desired = (id: string, namespace: string): KubeDesiredSandbox => ({
    id,
    generation: 1,
    template: "python:3.12",
    state: "Running",
    pauseStrategy: "Stop",
    resources: { cpuCount: 1, memoryMB: 512 },
    allowInternetAccess: true,
    namespace,
  });
  const newDriver = (watchNamespaces?: string[] | "all") =>
    new KubernetesDriver({ kubeConfig: kubeConfig("agent"), namespace: home, runtimeImage: "ghcr.io/kruise-edge/sandbox-agent:test", watchNamespaces });

  for (const [what, watch] of [
    ["--watch-namespaces", (): string[] | "all" => [teamA]],
    ["--all-namespaces (a cluster-wide list finds the namespace)", (): string[] | "all" => "all"],
  ] as const) {
    it(`${what}: a Sandbox in a team namespace is listed without any intent of its team`, async () => {
      const id = `lost-${Math.random().toString(36).slice(2, 8)}`;
      const first = newDriver();
      await first.start();
      await first.ensure(desired(id, teamA));
      await first.stop();

      const restarted = newDriver(watch());
      await restarted.start();
      try {
        const seen = (await restarted.list()).find((o) => o.id === id);
        expect(seen).toBeDefined();
        await restarted.destroy(id);
        await until("Sandbox gone", () => !kubectlOk(["-n", teamA, "get", "sbx", "-l", `agents.kruise.io/sandbox-id=${id}`, "-o", "name"]).trim());
      } finally {
        await restarted.stop();
      }
    });
  }
});
