// The whole path on Kubernetes: a SandboxSet applied with kubectl becomes the edge's pool, the
// agent (kubernetes driver) warms it as pods, the test kubelet makes them Ready and runs a real
// agent-runtime per pod (as the pod image starts it: its entrypoint, from the startup snapshot),
// and the unmodified e2b SDK creates a sandbox (a claim), runs a command in it through the edge's
// gateway and the agent's ingress, and kills it; the pool refills.
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestEdge, type TestEdge } from "./support/edge.ts";
import { runRuntimes, startKubeAgent, type KubeAgent } from "./support/kube-agent.ts";
import { TestKubelet } from "./support/kubelet.ts";
import { startWsEcho } from "./support/ws-echo.ts";
import { kubeConfig, kubectlOk, table, until } from "./support/namespace.ts";
import { withSandboxSet } from "./support/sandbox-set.ts";

const NS = "admin"; // the admin key's team: team name = namespace
let edge: TestEdge;
let kubelet: TestKubelet;
let runtimes: { stop(): Promise<void> };
let kube: KubeAgent;

beforeAll(async () => {
  edge = await startTestEdge("e2e");
  kubectlOk(["create", "namespace", NS]);
  kubelet = new TestKubelet(kubeConfig(), NS);
  await kubelet.start();
  runtimes = await runRuntimes(NS);
  // The agent as main.ts builds it: SandboxSets reach the edge over the agent's own session.
  kube = await startKubeAgent(edge, NS, "kube");
}, 180_000);

afterAll(async () => {
  await kube?.stop();
  await runtimes?.stop();
  await kubelet?.stop();
  await edge?.stop();
});

describe("E2B on Kubernetes", () => {
  it("a kubectl-applied SandboxSet warms pods; an E2B create claims one, runs a command, and the pool refills", async () => {
    await withSandboxSet(NS, "python", { replicas: 2, available: 2 });
    const sbx = await Sandbox.create("python", { apiKey: edge.adminKey, apiUrl: edge.url, sandboxUrl: edge.url, requestTimeoutMs: 30_000 });
    const run = await sbx.commands.run("echo hello from $HOSTNAME-less pod");
    expect(run.stdout).toContain("hello from");
    const claimed = await until("claimed Sandbox", () => {
      const rows = table(kubectlOk(["-n", NS, "get", "sbx", "-l", `agents.kruise.io/sandbox-id=${sbx.sandboxId}`]));
      return rows[0]?.CLAIMED === "true" ? rows[0] : undefined;
    }, 20_000);
    expect(claimed.STATUS).toBe("Running");
    await until("pool refilled", () => {
      const r = table(kubectlOk(["-n", NS, "get", "sbs", "python"]))[0];
      return r?.REPLICAS === "2" && r.AVAILABLE === "2";
    }, 60_000);
    expect(await sbx.kill()).toBe(true);
    await until("sandbox gone", () => !kubectlOk(["-n", NS, "get", "sbx", "-l", `agents.kruise.io/sandbox-id=${sbx.sandboxId}`, "-o", "name"]).trim(), 30_000);
  });

  it("a WebSocket to a user port of a pod passes the gateway and the ingress both ways", async () => {
    const echo = await startWsEcho(); // listens where the pod's runtime-url points: the pod's host
    const sbx = await Sandbox.create("python", { apiKey: edge.adminKey, apiUrl: edge.url, sandboxUrl: edge.url, requestTimeoutMs: 30_000 });
    try {
      const ws = new WebSocket(`${edge.url.replace(/^http/, "ws")}/socket`, { headers: { "e2b-sandbox-id": sbx.sandboxId, "e2b-sandbox-port": String(echo.port) } } as never);
      const reply = await new Promise<string>((ok, fail) => {
        const timer = setTimeout(() => fail(new Error("no echo within 15 s")), 15_000);
        ws.onopen = () => ws.send("ping through the edge");
        ws.onmessage = (e) => (clearTimeout(timer), ok(String(e.data)));
        ws.onerror = ws.onclose = () => (clearTimeout(timer), fail(new Error("websocket failed or closed before the echo")));
      });
      ws.close();
      expect(reply).toBe("ping through the edge");
    } finally {
      await sbx.kill();
      echo.server.close();
    }
  });

  it("an E2B sandbox of team T is a Sandbox in namespace T (kubectl get sbx -n T)", async () => {
    const team = `team-${Math.random().toString(36).slice(2, 8)}`;
    kubectlOk(["create", "namespace", team]);
    const teamKubelet = new TestKubelet(kubeConfig(), team);
    await teamKubelet.start();
    const teamRuntimes = await runRuntimes(team);
    try {
      // The team and its template (no warm pool: an on-demand sandbox), then a key of the team.
      const put = await fetch(`${edge.url}/admin/teams/${team}/templates/tools`, {
        method: "PUT",
        headers: { "x-api-key": edge.adminKey, "content-type": "application/json" },
        body: JSON.stringify({ spec: { cluster: "kube", image: "python:3.12", replicas: 0 } }),
      });
      expect(put.ok).toBe(true);
      const res = await fetch(`${edge.url}/api-keys`, { method: "POST", headers: { "x-api-key": edge.adminKey, "content-type": "application/json" }, body: JSON.stringify({ name: "kube", teamName: team }) });
      const key = ((await res.json()) as { key: string }).key;
      const sbx = await Sandbox.create("tools", { apiKey: key, apiUrl: edge.url, sandboxUrl: edge.url, requestTimeoutMs: 30_000 });
      expect((await sbx.commands.run("echo in team namespace")).stdout).toContain("in team namespace");
      const selector = `agents.kruise.io/sandbox-id=${sbx.sandboxId}`;
      const row = await until("Sandbox in the team's namespace", () => table(kubectlOk(["-n", team, "get", "sbx", "-l", selector]))[0]);
      expect(row).toMatchObject({ STATUS: "Running", CLAIMED: "true" });
      expect(kubectlOk(["-n", team, "get", "pods", "-l", selector, "-o", "name"]).trim()).not.toBe("");
      expect(kubectlOk(["-n", NS, "get", "sbx", "-l", selector, "-o", "name"]).trim()).toBe("");
      expect(await sbx.kill()).toBe(true);
      await until("team sandbox gone", () => !kubectlOk(["-n", team, "get", "sbx", "-l", selector, "-o", "name"]).trim(), 30_000);
    } finally {
      await teamRuntimes.stop();
      await teamKubelet.stop();
    }
  });

  it("kubectl scale and delete of the SandboxSet converge: pods follow the pool, nothing is left behind", async () => {
    const names = (out: string) => out.trim().split("\n").filter(Boolean).map((n) => n.replace(/^.*\//, "")).sort();
    // Each stage's check throws what it saw, so a stalled stage's timeout names the condition that
    // failed; the Sandboxes the agent's cache holds beside the cluster's show a ghost member (one
    // only the agent still counts in REPLICAS).
    const state = () => {
      const row = table(kubectlOk(["-n", NS, "get", "sbs", "python", "--ignore-not-found"]))[0];
      const pods = names(kubectlOk(["-n", NS, "get", "pods", "-l", "agents.kruise.io/sandbox-pool=python", "-o", "name"])).length;
      const sandboxes = names(kubectlOk(["-n", NS, "get", "sbx", "-o", "name"]));
      const cached = kube.driver.sandboxes.list().map((o) => o.metadata!.name!).sort();
      return { replicas: row?.REPLICAS, available: row?.AVAILABLE, pods, sandboxes, said: `REPLICAS=${row?.REPLICAS} AVAILABLE=${row?.AVAILABLE} pods=${pods} sbx=[${sandboxes}] agent's sbx=[${cached}]` };
    };
    const expectState = (ok: (s: ReturnType<typeof state>) => boolean) => {
      const s = state();
      if (!ok(s)) throw new Error(s.said);
      return true;
    };
    kubectlOk(["-n", NS, "scale", "sbs", "python", "--replicas=4"]);
    await until("4 warm", () => expectState((s) => s.available === "4" && s.pods === 4), 60_000);
    kubectlOk(["-n", NS, "scale", "sbs", "python", "--replicas=1"]);
    await until("1 warm", () => expectState((s) => s.replicas === "1" && s.pods === 1), 60_000);
    kubectlOk(["-n", NS, "delete", "sbs", "python"]);
    await until("drained", () => expectState((s) => s.pods === 0 && s.sandboxes.length === 0), 60_000);
    // Above the sum of the stage bounds, so a stalled stage fails with its own name (one CI run
    // timed out here at the old 60 s test bound without saying which stage had stalled).
  }, 200_000);
});
