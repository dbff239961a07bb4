// SandboxClaim → the edge: a claim applied with kubectl takes sandboxes from the team's pool
// through the edge (the whole local system: sqld, edge on workerd, agent with the local driver),
// its status reports the outcome, a restarted controller does not claim twice, a missing
// SandboxSet completes the claim with SandboxSetNotFound, and ttlAfterCompleted deletes only the claim.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLAIM_METADATA_KEY, E2bApiClaimer, SandboxClaimSync } from "../../controllers/drivers/kubernetes/sandboxclaim-sync.ts";
import { startSystem, type System } from "../../scripts/lib/system.ts";
import { freshNamespace, kubeConfig, kubectl, kubectlOk, table, until } from "./support/namespace.ts";

let dataDir: string;
let sys: System;
let ns: string;
let teamKey: string;
let sync: SandboxClaimSync;

async function startSync(): Promise<void> {
  sync = new SandboxClaimSync({ kubeConfig: kubeConfig("agent"), namespace: ns, claimer: new E2bApiClaimer(sys.apiUrl, teamKey), retryMs: 200 });
  await sync.start();
}

const sdk = () => ({ apiKey: teamKey, apiUrl: sys.apiUrl, sandboxUrl: sys.apiUrl, requestTimeoutMs: 30_000 });
const claimStatus = (name: string) => JSON.parse(kubectlOk(["-n", ns, "get", "sbc", name, "-o", "json"])) as { metadata: { uid: string }; status?: { phase?: string; claimedReplicas?: number; conditions?: { type: string; reason: string }[] } };
async function edgeSandboxes(uid: string): Promise<string[]> {
  const listed = await Sandbox.list({ ...sdk(), query: { metadata: { [CLAIM_METADATA_KEY]: uid } } }).nextItems();
  return listed.map((s) => s.sandboxId);
}

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), "sbx-kube-claims-"));
  sys = await startSystem({ dataDir, baseReplicas: 2 });
  ns = await freshNamespace("claims"); // the team of the same name claims from the public `base` pool
  const res = await fetch(`${sys.apiUrl}/api-keys`, { method: "POST", headers: { "x-api-key": sys.apiKey, "content-type": "application/json" }, body: JSON.stringify({ name: "kube", teamName: ns }) });
  teamKey = ((await res.json()) as { key: string }).key;
  await startSync();
}, 180_000);

afterAll(async () => {
  await sync?.stop();
  await sys?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

describe("SandboxClaim → edge", () => {
  it("claims replicas through the edge and reports Completed with AllReplicasClaimed", async () => {
    kubectlOk(["-n", ns, "apply", "-f", "-"], `
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxClaim
metadata: { name: batch }
spec: { templateName: base, replicas: 2, envVars: { MODE: eval }, labels: { purpose: kube-test } }
`);
    const claim = await until("claim completed", () => {
      const c = claimStatus("batch");
      return c.status?.phase === "Completed" ? c : undefined;
    }, 60_000);
    expect(claim.status!.claimedReplicas).toBe(2);
    expect(claim.status!.conditions).toContainEqual(expect.objectContaining({ type: "Completed", reason: "AllReplicasClaimed" }));
    expect(table(kubectlOk(["-n", ns, "get", "sbc", "batch"]))[0]).toMatchObject({ PHASE: "Completed", TEMPLATE: "base", DESIRED: "2", CLAIMED: "2" });

    const ids = await edgeSandboxes(claim.metadata.uid);
    expect(ids).toHaveLength(2);
    const sbx = await Sandbox.connect(ids[0]!, sdk());
    expect((await sbx.commands.run("echo $MODE")).stdout).toBe("eval\n");
    expect((await Sandbox.getInfo(ids[0]!, sdk())).metadata).toMatchObject({ purpose: "kube-test" });
  });

  it("a restarted controller does not claim again", async () => {
    await sync.stop();
    await startSync();
    await new Promise((r) => setTimeout(r, 1000));
    const claim = claimStatus("batch");
    expect(claim.status!.claimedReplicas).toBe(2);
    expect(await edgeSandboxes(claim.metadata.uid)).toHaveLength(2);
  });

  it("a claim on a SandboxSet the edge does not have completes with SandboxSetNotFound", async () => {
    kubectlOk(["-n", ns, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxClaim\nmetadata: { name: nowhere }\nspec: { templateName: nope }\n");
    const claim = await until("claim completed", () => {
      const c = claimStatus("nowhere");
      return c.status?.phase === "Completed" ? c : undefined;
    }, 30_000);
    expect(claim.status!.claimedReplicas).toBe(0);
    expect(claim.status!.conditions).toContainEqual(expect.objectContaining({ type: "Completed", reason: "SandboxSetNotFound" }));
  });

  it("ttlAfterCompleted deletes the claim but not its sandboxes", async () => {
    kubectlOk(["-n", ns, "apply", "-f", "-"], "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxClaim\nmetadata: { name: brief }\nspec: { templateName: base, ttlAfterCompleted: 1s }\n");
    const uid = await until("completed", () => {
      const c = claimStatus("brief");
      return c.status?.phase === "Completed" ? c.metadata.uid : undefined;
    }, 60_000);
    await until("claim deleted", () => kubectl(["-n", ns, "get", "sbc", "brief"]).status !== 0, 15_000);
    expect(await edgeSandboxes(uid)).toHaveLength(1);
  });
});
