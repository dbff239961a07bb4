// Labels and annotations for a sandbox's cluster objects, at the edge: an E2B create's metadata
// splits into `label:<k>` labels and annotations (keys that are valid annotation keys), both
// carried by every intent of the sandbox; a label or annotation the API server would refuse, or a
// reserved agents.kruise.io key, is a 400 JSON error; a SandboxClaim's annotations reach the
// claimed sandboxes' intents, and one with a bad key is rejected before anything is claimed.
import { exports } from "cloudflare:workers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CrdLink } from "../support/crd-link.ts";
import { fetchTransport, ScriptedAgent } from "../support/scripted-agent.ts";
import { bindTeam, call, createTeam, expectError, expectStatus, startAgent, unique, type TestTeam } from "./helpers.ts";

let team: TestTeam;
let agent: ScriptedAgent;

beforeAll(async () => {
  team = await createTeam(unique("annot"), { replicas: 1 });
  agent = await startAgent(team.cluster);
  await agent.waitUntil(() => agent.running().length >= 1);
});
afterAll(() => agent.disconnect());

const create = (metadata: Record<string, string>) => call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, metadata } });

describe("E2B create metadata → the sandbox's labels and annotations", () => {
  it("label:<k> is a label, valid annotation keys are annotations, other keys stay E2B metadata only; every intent carries them", async () => {
    const sbx = await expectStatus(create({ "label:tier": "gold", owner: "ci", "example.com/run": "42", "user id": "a&b" }), 201);
    const intent = agent.sandboxes.get(sbx.sandboxID)!.intent;
    expect(intent.labels).toEqual({ tier: "gold" });
    expect(intent.annotations).toEqual({ owner: "ci", "example.com/run": "42" });
    const info = await expectStatus(call(`/sandboxes/${sbx.sandboxID}`, { key: team.key }), 200);
    expect(info.metadata).toEqual({ "label:tier": "gold", owner: "ci", "example.com/run": "42", "user id": "a&b" });
    // A later intent (a pause) still carries them, so a pod made again gets them too.
    await expectStatus(call(`/sandboxes/${sbx.sandboxID}/pause`, { key: team.key, body: {} }), 204);
    await agent.waitUntil(() => agent.sandboxes.get(sbx.sandboxID)?.phase === "Paused");
    expect(agent.sandboxes.get(sbx.sandboxID)!.intent.annotations).toEqual({ owner: "ci", "example.com/run": "42" });
  });

  it("refuses what the API server would refuse, and reserved keys, with 400 JSON", async () => {
    await expectError(create({ "label:tier": "not a value" }), 400, /not a valid label value/);
    await expectError(create({ "label:tier": "v".repeat(64) }), 400, /not a valid label value/);
    await expectError(create({ "label:bad key": "v" }), 400, /not a valid label name/);
    await expectError(create({ "label:agents.kruise.io/sandbox-claimed": "true" }), 400, /reserved/);
    await expectError(create({ "agents.kruise.io/edge-generation": "9" }), 400, /reserved/);
    await expectError(create({ "security.agents.kruise.io/agent-name": "a" }), 400, /reserved/);
    // Within the metadata bounds (64 entries of 4 KiB), beyond what an object's annotations may take.
    const big = Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`k${i}`, "x".repeat(4000)]));
    await expectError(create(big), 400, /annotations take \d+ bytes, at most 131072/);
  });

  it("refuses keys Kubernetes, the container runtime or the network reads from a pod (review 25 H6), with 400 {code, message}", async () => {
    const refused: [string, RegExp][] = [
      ["container.apparmor.security.beta.kubernetes.io/sandbox", /under "\*\.kubernetes\.io\/"/],
      ["seccomp.security.alpha.kubernetes.io/pod", /under "\*\.kubernetes\.io\/"/],
      ["kubernetes.io/egress-bandwidth", /under "kubernetes\.io\/"/],
      ["cluster-autoscaler.kubernetes.io/safe-to-evict", /kubernetes\.io/],
      ["k8s.v1.cni.cncf.io/networks", /under "\*\.cni\.cncf\.io\/"/],
      ["v1.multus-cni.io/default-network", /multus-cni\.io/],
      ["cni.projectcalico.org/ipAddrs", /projectcalico\.org/],
      ["sidecar.istio.io/inject", /istio\.io/],
      ["traffic.sidecar.istio.io/excludeOutboundIPRanges", /istio\.io/],
      ["config.linkerd.io/skip-outbound-ports", /linkerd\.io/],
      ["io.kubernetes.cri-o.Devices", /under "io\.kubernetes\."/],
      ["io.kubernetes.cri-o.userns-mode", /io\.kubernetes\./],
      ["io.katacontainers.config.hypervisor.kernel_params", /under "io\.katacontainers\."/],
      ["run.oci.keep_original_groups", /run\.oci\./],
      ["label:node-role.kubernetes.io/control-plane", /label "node-role\.kubernetes\.io\/control-plane" is under/],
    ];
    for (const [key, message] of refused) {
      const res = await create({ [key]: "unconfined" });
      expect(res.status, key).toBe(400);
      const body = (await res.json()) as { code: number; message: string };
      expect(body.code, key).toBe(400);
      expect(body.message, key).toMatch(message);
    }
    // Look-alikes outside those domains stay annotations.
    const sbx = await expectStatus(create({ "notkubernetes.io/x": "1", "example.com/io.kubernetes.cri-o.Devices": "2" }), 201);
    expect(agent.sandboxes.get(sbx.sandboxID)!.intent.annotations).toEqual({ "notkubernetes.io/x": "1", "example.com/io.kubernetes.cri-o.Devices": "2" });
  });
});

describe("SandboxClaim annotations", () => {
  it("reach the claimed sandboxes' intents; a claim with an invalid annotation key is rejected and claims nothing", async () => {
    const ns = unique("sbc-annot");
    const agent2 = new ScriptedAgent();
    const crd = new CrdLink();
    await bindTeam(ns, ns);
    await crd.connect(agent2, fetchTransport((url, init) => exports.default.fetch(url, init) as never, "test-cluster-token", ns));
    try {
      await crd.call("sandboxsets", { namespace: ns, name: "pool", uid: "uid-pool", generation: 1, spec: { replicas: 1 } });
      await agent2.waitUntil(() => agent2.running().length === 1);
      const bad = await crd.call("claims", { namespace: ns, claim: { name: "bad", uid: "u-bad" }, templateName: "pool", replicas: 1, annotations: { "not a key": "x" } });
      expect(bad).toMatchObject({ result: "rejected", code: "bad_request", message: expect.stringMatching(/not a valid annotation key/) });
      expect(agent2.running()).toHaveLength(1);
      expect(agent2.received.some((r) => r.intent.owner.kind === "sandbox")).toBe(false);

      const ok = await crd.call("claims", { namespace: ns, claim: { name: "ok", uid: "u-ok" }, templateName: "pool", replicas: 1, annotations: { "example.com/note": "hi there" } });
      expect(ok).toMatchObject({ result: "applied" });
      const intent = agent2.sandboxes.get(ok.sandboxIds![0]!)!.intent;
      expect(intent.annotations).toEqual({ "example.com/note": "hi there", "kruise-claim-uid": "u-ok" });
    } finally {
      agent2.disconnect();
    }
  });
});
