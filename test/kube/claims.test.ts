// SandboxClaims and kubectl edits of Sandboxes over the agent's session, against the real edge
// and the agent with the kubernetes driver (the test kubelet makes pods Ready, a real
// agent-runtime per pod takes the claim's /init): a claim takes its sandboxes from the team's pool
// (status AllReplicasClaimed), a restarted agent does not claim twice, a missing SandboxSet
// completes with SandboxSetNotFound, ttlAfterCompleted deletes only the claim, and
// `kubectl patch sbx … paused:true` / `kubectl delete sbx` pause and kill through the edge.
// A claim's labels and annotations (and an E2B create's metadata) are on the claimed Sandboxes and
// their Pods, never on warm members, and come back after an agent restart.
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLAIM_METADATA_KEY } from "../../schema/protocol/index.ts";
import type { TestEdge } from "./support/edge.ts";
import type { KubeAgent } from "./support/kube-agent.ts";
import { kubectl, kubectlOk, table, until } from "./support/namespace.ts";
import { startKubeSystem, type KubeSystem } from "./support/system.ts";
import { withSandboxSet } from "./support/sandbox-set.ts";

let edge: TestEdge;
let ns: string;
let sys: KubeSystem;
let k: KubeAgent;

const claimStatus = (name: string) =>
  JSON.parse(kubectlOk(["-n", ns, "get", "sbc", name, "-o", "json"])) as { metadata: { uid: string }; status?: { phase?: string; claimedReplicas?: number; message?: string; conditions?: { type: string; reason: string }[] } };
const completed = (name: string) => () => {
  const c = claimStatus(name);
  return c.status?.phase === "Completed" ? c : undefined;
};

async function edge_(path: string, init: RequestInit = {}): Promise<Response> {
  return fetch(`${edge.url}${path}`, { ...init, headers: { "x-api-key": edge.adminKey, "content-type": "application/json", ...init.headers } });
}

/** Sandboxes the edge holds for a claim (admin view: claimed sandboxes belong to the claim). */
async function claimed(uid: string): Promise<{ sandboxID: string; metadata: Record<string, string> }[]> {
  const res = await edge_(`/sandboxes?metadata=${encodeURIComponent(`${CLAIM_METADATA_KEY}=${uid}`)}`);
  return (await res.json()) as { sandboxID: string; metadata: Record<string, string> }[];
}

async function info(id: string): Promise<{ status: number; state?: string }> {
  const res = await edge_(`/sandboxes/${id}`);
  return { status: res.status, ...(res.ok ? ((await res.json()) as { state: string }) : {}) };
}

type Meta = { labels?: Record<string, string>; annotations?: Record<string, string> };
/** The metadata of the Sandbox and the Pod of a sandbox, as `kubectl get -o json` shows them. */
const objectsOf = (id: string): { sbx?: Meta; pod?: Meta } => {
  const get = (kind: string) => (JSON.parse(kubectlOk(["-n", ns, "get", kind, "-l", `agents.kruise.io/sandbox-id=${id}`, "-o", "json"])).items as { metadata: Meta }[])[0]?.metadata;
  return { sbx: get("sbx"), pod: get("pods") };
};
const warmMembers = () =>
  JSON.parse(kubectlOk(["-n", ns, "get", "sbx", "-l", "agents.kruise.io/sandbox-pool=pool,agents.kruise.io/sandbox-claimed=false", "-o", "json"])).items as { metadata: Meta & { name: string } }[];

const sbxOf = (id: string) => table(kubectlOk(["-n", ns, "get", "sbx", "-l", `agents.kruise.io/sandbox-id=${id}`]))[0];
const podOf = (id: string) => kubectlOk(["-n", ns, "get", "pods", "-l", `agents.kruise.io/sandbox-id=${id}`, "-o", "name"]).trim();

beforeAll(async () => {
  sys = await startKubeSystem("claims", "kube-claims", { runtimes: true });
  ({ edge, ns, agent: k } = sys);
  await withSandboxSet(ns, "pool", { replicas: 2, available: 2 });
}, 180_000);

afterAll(() => sys?.stop());

describe("SandboxClaim → edge over the agent link", () => {
  it("claims replicas from the team's pool and reports Completed with AllReplicasClaimed", async () => {
    kubectlOk(["-n", ns, "apply", "-f", "-"], `
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxClaim
metadata: { name: batch }
spec: { templateName: pool, replicas: 2, envVars: { MODE: eval }, labels: { purpose: kube-test }, annotations: { owner: ci } }
`);
    const claim = await until("claim completed", completed("batch"), 60_000);
    expect(claim.status!.claimedReplicas).toBe(2);
    expect(claim.status!.conditions).toContainEqual(expect.objectContaining({ type: "Completed", reason: "AllReplicasClaimed" }));
    expect(table(kubectlOk(["-n", ns, "get", "sbc", "batch"]))[0]).toMatchObject({ PHASE: "Completed", TEMPLATE: "pool", DESIRED: "2", CLAIMED: "2" });

    const held = await claimed(claim.metadata.uid);
    expect(held).toHaveLength(2);
    expect(held[0]!.metadata).toMatchObject({ "label:purpose": "kube-test", owner: "ci" });
    for (const s of held) await until(`Sandbox of ${s.sandboxID} claimed`, () => sbxOf(s.sandboxID)?.CLAIMED === "true", 30_000);
    // The claim's labels are labels of its Sandboxes and their Pods.
    for (const kind of ["sbx", "pods"]) {
      await until(`${kind} labelled purpose=kube-test`, () => kubectlOk(["-n", ns, "get", kind, "-l", "purpose=kube-test", "-o", "name"]).trim().split("\n").filter(Boolean).length === 2, 15_000);
    }
    // The claim's envVars reached the pod's runtime (its /init), seen through the edge's gateway.
    const sbx = await Sandbox.connect(held[0]!.sandboxID, { apiKey: edge.adminKey, apiUrl: edge.url, sandboxUrl: edge.url, requestTimeoutMs: 30_000 });
    expect((await sbx.commands.run("echo $MODE")).stdout).toBe("eval\n");
    // The pool refills behind the claim.
    await until("pool refilled", () => table(kubectlOk(["-n", ns, "get", "sbs", "pool"]))[0]?.AVAILABLE === "2", 60_000);
  });

  it("the claim's labels and annotations are on its Sandboxes and their Pods (with agents.kruise.io/claim-name), not on warm members", async () => {
    const uid = claimStatus("batch").metadata.uid;
    for (const s of await claimed(uid)) {
      const want = { owner: "ci", [CLAIM_METADATA_KEY]: uid };
      const { sbx, pod } = await until(`annotations of ${s.sandboxID}`, () => {
        const o = objectsOf(s.sandboxID);
        return o.sbx?.annotations?.owner && o.pod?.annotations?.owner ? o : undefined;
      }, 15_000);
      expect(sbx!.annotations).toMatchObject(want);
      expect(sbx!.labels).toMatchObject({ purpose: "kube-test", "agents.kruise.io/claim-name": "batch" });
      expect(pod!.annotations).toMatchObject(want);
      expect(pod!.labels).toMatchObject({ purpose: "kube-test" });
    }
    expect(kubectlOk(["-n", ns, "get", "sbx", "-l", "agents.kruise.io/claim-name=batch", "-o", "name"]).trim().split("\n")).toHaveLength(2);
    await until("pool refilled", () => warmMembers().length === 2, 60_000);
    for (const m of warmMembers()) {
      expect(m.metadata.annotations?.owner).toBeUndefined();
      expect(m.metadata.labels?.purpose).toBeUndefined();
      expect(m.metadata.labels?.["agents.kruise.io/claim-name"]).toBeUndefined();
    }
  });

  it("a restarted agent does not claim again, and puts back a claim annotation removed while it was down", async () => {
    const [first] = await claimed(claimStatus("batch").metadata.uid);
    const name = kubectlOk(["-n", ns, "get", "sbx", "-l", `agents.kruise.io/sandbox-id=${first!.sandboxID}`, "-o", "name"]).trim();
    k = await sys.restart(() => {
      kubectlOk(["-n", ns, "annotate", name, "owner-"]);
      expect(objectsOf(first!.sandboxID).sbx!.annotations?.owner).toBeUndefined();
    });
    await until("annotation back", () => objectsOf(first!.sandboxID).sbx?.annotations?.owner === "ci", 30_000);
    const claim = claimStatus("batch");
    expect(claim.status!.claimedReplicas).toBe(2);
    expect(await claimed(claim.metadata.uid)).toHaveLength(2);
  });

  it("a claim whose annotations use a reserved key or labels the API server would refuse takes nothing: Completed with InvalidMetadata", async () => {
    const before = warmMembers().length;
    kubectlOk(["-n", ns, "apply", "-f", "-"], `
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxClaim
metadata: { name: reserved }
spec: { templateName: pool, annotations: { "agents.kruise.io/edge-generation": "999" } }
---
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxClaim
metadata: { name: badlabel }
spec: { templateName: pool, labels: { purpose: "not a label value" } }
`);
    for (const [name, message] of [["reserved", /spec\.annotations: annotation "agents\.kruise\.io\/edge-generation" uses a reserved prefix/], ["badlabel", /spec\.labels: .*not a valid label value/]] as const) {
      const claim = await until(`${name} completed`, completed(name), 30_000);
      expect(claim.status!.claimedReplicas).toBe(0);
      expect(claim.status!.message).toMatch(message);
      expect(claim.status!.conditions).toContainEqual(expect.objectContaining({ type: "Completed", reason: "InvalidMetadata" }));
      expect(await claimed(claim.metadata.uid)).toHaveLength(0);
    }
    expect(warmMembers().length).toBe(before);
  });

  it("an E2B create's metadata: label:<k> is a label, valid keys are annotations (reserved ones refused with 400)", async () => {
    const res = await edge_("/api-keys", { method: "POST", body: JSON.stringify({ name: "e2b", teamName: ns }) });
    const key = ((await res.json()) as { key: string }).key;
    const opts = { apiKey: key, apiUrl: edge.url, sandboxUrl: edge.url, requestTimeoutMs: 30_000 };
    const sbx = await Sandbox.create("pool", { ...opts, metadata: { "label:tier": "gold", "example.com/run": "42", note: "free text: ok", "user id": "a&b" } });
    const { sbx: obj, pod } = await until("metadata on the objects", () => {
      const o = objectsOf(sbx.sandboxId);
      return o.sbx?.labels?.tier && o.pod?.annotations?.note ? o : undefined;
    }, 15_000);
    for (const m of [obj!, pod!]) {
      expect(m.labels).toMatchObject({ tier: "gold" });
      expect(m.annotations).toMatchObject({ "example.com/run": "42", note: "free text: ok" });
      expect(Object.keys(m.annotations!)).not.toContain("user id"); // not an annotation key: E2B metadata only
    }
    expect((await sbx.getInfo()).metadata).toEqual({ "label:tier": "gold", "example.com/run": "42", note: "free text: ok", "user id": "a&b" });
    for (const metadata of [{ "agents.kruise.io/edge-generation": "1" }, { "label:tier": "not a value" }]) {
      const r = await fetch(`${edge.url}/sandboxes`, { method: "POST", headers: { "x-api-key": key, "content-type": "application/json" }, body: JSON.stringify({ templateID: "pool", metadata }) });
      expect(r.status).toBe(400);
      expect(await r.json()).toMatchObject({ code: 400, message: expect.stringMatching(/reserved|not a valid label value/) });
    }
    await sbx.kill();
  });

  it("a claim on a SandboxSet the team does not have completes with SandboxSetNotFound", async () => {
    kubectlOk(["-n", ns, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxClaim\nmetadata: { name: nowhere }\nspec: { templateName: nope }\n");
    const claim = await until("claim completed", completed("nowhere"), 30_000);
    expect(claim.status!.claimedReplicas).toBe(0);
    expect(claim.status!.conditions).toContainEqual(expect.objectContaining({ type: "Completed", reason: "SandboxSetNotFound" }));
  });

  it("the claim's shutdownTime is its sandboxes' end of life on the edge", async () => {
    const shutdown = new Date(Date.now() + 2 * 3600_000);
    kubectlOk(["-n", ns, "apply", "-f", "-"], `apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxClaim\nmetadata: { name: timed }\nspec: { templateName: pool, shutdownTime: "${shutdown.toISOString().replace(/\.\d+Z$/, "Z")}" }\n`);
    const uid = (await until("completed", completed("timed"), 60_000)).metadata.uid;
    const [s] = await claimed(uid);
    const detail = (await (await edge_(`/sandboxes/${s!.sandboxID}`)).json()) as { endAt: string };
    expect(Math.abs(Date.parse(detail.endAt) - shutdown.getTime())).toBeLessThan(10_000);
  });

  it("ttlAfterCompleted deletes the claim but not its sandboxes", async () => {
    kubectlOk(["-n", ns, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxClaim\nmetadata: { name: brief }\nspec: { templateName: pool, ttlAfterCompleted: 1s }\n");
    const uid = (await until("completed", completed("brief"), 60_000)).metadata.uid;
    await until("claim deleted", () => kubectl(["-n", ns, "get", "sbc", "brief"]).status !== 0, 15_000);
    expect(await claimed(uid)).toHaveLength(1);
  });
});

describe("kubectl edits of a Sandbox go through the edge", () => {
  let id: string;

  beforeAll(async () => {
    kubectlOk(["-n", ns, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxClaim\nmetadata: { name: edits }\nspec: { templateName: pool }\n");
    const claim = await until("claim completed", completed("edits"), 60_000);
    id = (await claimed(claim.metadata.uid))[0]!.sandboxID;
    await until("Sandbox claimed and running", () => sbxOf(id)?.CLAIMED === "true" && podOf(id) !== "", 30_000);
  }, 90_000);

  it("kubectl patch sbx paused:true pauses on the edge, and the Stop pause deletes the pod", async () => {
    const name = kubectlOk(["-n", ns, "get", "sbx", "-l", `agents.kruise.io/sandbox-id=${id}`, "-o", "name"]).trim();
    kubectlOk(["-n", ns, "patch", name, "--type", "merge", "-p", '{"spec":{"paused":true}}']);
    await until("edge says paused", async () => (await info(id)).state === "paused", 30_000);
    await until("pod gone", () => podOf(id) === "", 30_000);
    await until("Sandbox status Paused", () => sbxOf(id)?.STATUS === "Paused", 15_000);
  });

  it("kubectl patch sbx paused:false resumes it: a new pod", async () => {
    const name = kubectlOk(["-n", ns, "get", "sbx", "-l", `agents.kruise.io/sandbox-id=${id}`, "-o", "name"]).trim();
    kubectlOk(["-n", ns, "patch", name, "--type", "merge", "-p", '{"spec":{"paused":false}}']);
    await until("edge says running", async () => (await info(id)).state === "running", 30_000);
    await until("pod back", () => podOf(id) !== "", 30_000);
  });

  it("an edit made while the agent was down reaches the edge when it is back", async () => {
    const name = kubectlOk(["-n", ns, "get", "sbx", "-l", `agents.kruise.io/sandbox-id=${id}`, "-o", "name"]).trim();
    k = await sys.restart(() => kubectlOk(["-n", ns, "patch", name, "--type", "merge", "-p", '{"spec":{"paused":true}}']));
    await until("edge says paused", async () => (await info(id)).state === "paused", 30_000);
    await until("pod gone", () => podOf(id) === "", 30_000);
    kubectlOk(["-n", ns, "patch", name, "--type", "merge", "-p", '{"spec":{"paused":false}}']);
    await until("edge says running", async () => (await info(id)).state === "running", 30_000);
    await until("pod back", () => podOf(id) !== "", 30_000);
  });

  it("an edit made against a generation the edge has moved past is stale and ignored (the edge stays the authority)", async () => {
    const name = kubectlOk(["-n", ns, "get", "sbx", "-l", `agents.kruise.io/sandbox-id=${id}`, "-o", "name"]).trim();
    k = await sys.restart(async () => {
      // Meanwhile the E2B API pauses and resumes it (the edge is two generations ahead of the object).
      // E2B's pause answers once the sandbox is paused; with its agent away that cannot happen, so
      // after its bound the answer is a 500 saying the stored pause goes on.
      const pause = await edge_(`/sandboxes/${id}/pause`, { method: "POST", body: "{}" });
      expect(pause.status).toBe(500);
      expect(((await pause.json()) as { message: string }).message).toMatch(/sent again|the pause continues/);
      await edge_(`/sandboxes/${id}/connect`, { method: "POST", body: JSON.stringify({ timeout: 300 }) }).catch(() => {});
      kubectlOk(["-n", ns, "patch", name, "--type", "merge", "-p", '{"spec":{"paused":true}}']);
    });
    await until("the edge's answer", () => k.logs.some((l) => l.startsWith(`kubectl pause of ${id}: stale`)), 30_000);
    await until("edge says running", async () => (await info(id)).state === "running", 30_000);
    expect(podOf(id)).not.toBe("");
    await until("the Sandbox follows the edge", () => JSON.parse(kubectlOk(["-n", ns, "get", name, "-o", "json"])).spec.paused === false, 30_000);
  });

  it("kubectl delete sbx kills it on the edge", async () => {
    const name = kubectlOk(["-n", ns, "get", "sbx", "-l", `agents.kruise.io/sandbox-id=${id}`, "-o", "name"]).trim();
    kubectlOk(["-n", ns, "delete", name, "--wait=false"]);
    await until("edge forgot it", async () => (await info(id)).status === 404, 30_000);
    await until("Sandbox and pod gone", () => !kubectlOk(["-n", ns, "get", "sbx", "-l", `agents.kruise.io/sandbox-id=${id}`, "-o", "name"]).trim() && podOf(id) === "", 30_000);
  });
});

it("kubectl delete of a warm pool member: the edge drops it from the pool, which replaces it", async () => {
  const warm = () => JSON.parse(kubectlOk(["-n", ns, "get", "sbx", "-l", "agents.kruise.io/sandbox-pool=pool,agents.kruise.io/sandbox-claimed=false", "-o", "json"])).items as { metadata: { name: string; annotations: Record<string, string> } }[];
  await until("warm pool of 2", () => table(kubectlOk(["-n", ns, "get", "sbs", "pool"]))[0]?.AVAILABLE === "2", 60_000);
  const victim = warm()[0]!;
  const victimId = victim.metadata.annotations["agents.kruise.io/sandbox-id"]!;
  kubectlOk(["-n", ns, "delete", "sbx", victim.metadata.name, "--wait=false"]);
  await until("the member, its Sandbox and pod gone", () => !kubectlOk(["-n", ns, "get", "sbx", "-l", `agents.kruise.io/sandbox-id=${victimId}`, "-o", "name"]).trim() && podOf(victimId) === "", 30_000);
  await until("replaced", () => {
    const members = warm().map((m) => m.metadata.annotations["agents.kruise.io/sandbox-id"]);
    return members.length === 2 && !members.includes(victimId) && table(kubectlOk(["-n", ns, "get", "sbs", "pool"]))[0]?.AVAILABLE === "2";
  }, 60_000);
});
