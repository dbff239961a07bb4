// Auto-pause from the Sandbox CRD: `kubectl patch` of a claimed Sandbox's spec.probes and
// spec.autoPausePolicy reaches the edge (a `requests` item, action autoPause) and starts its
// probe there (ProbeDO, the same as an E2B create's auto-pause-policy extension): while the exec
// probe's output says busy the sandbox runs, once it says idle for the threshold the edge pauses
// it; with resume.whenProbedScheduleTime it wakes ahead of the time a second probe names. Removals made with kubectl while the agent is down (a Sandbox's policy or lifecycle hooks, a
// SandboxUpdateOps) are seen once it is back; an E2B create's own policy is not a Sandbox's to drop.
import { rmSync, writeFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { kubectlOk, until } from "./support/namespace.ts";
import { startKubeSystem, type KubeSystem } from "./support/system.ts";
import { withSandboxSet } from "./support/sandbox-set.ts";

let sys: KubeSystem;
let key: string;
const activity = `/tmp/kube-auto-pause-${process.pid}`;

beforeAll(async () => {
  sys = await startKubeSystem("autopause", "kube-autopause", { runtimes: true });
  await withSandboxSet(sys.ns, "app", { replicas: 1, available: 1 });
  const res = await fetch(`${sys.edge.url}/api-keys`, { method: "POST", headers: { "x-api-key": sys.edge.adminKey, "content-type": "application/json" }, body: JSON.stringify({ name: "ap", teamName: sys.ns }) });
  key = ((await res.json()) as { key: string }).key;
}, 180_000);

afterAll(async () => {
  rmSync(activity, { force: true });
  await sys?.stop();
});

const edgeState = async (id: string) => ((await (await fetch(`${sys.edge.url}/sandboxes/${id}`, { headers: { "x-api-key": key } })).json()) as { state: string }).state;
const sandboxName = (id: string) => kubectlOk(["-n", sys.ns, "get", "sbx", "-l", `agents.kruise.io/sandbox-id=${id}`, "-o", "name"]).trim();
/** A sandbox claimed through the E2B API, running: its id and its Sandbox's name. */
async function claimRunning(): Promise<{ id: string; name: string }> {
  const created = await fetch(`${sys.edge.url}/sandboxes`, { method: "POST", headers: { "x-api-key": key, "content-type": "application/json" }, body: JSON.stringify({ templateID: "app", timeout: 600 }) });
  expect(created.status).toBe(201);
  const id = ((await created.json()) as { sandboxID: string }).sandboxID;
  await until("running", async () => (await edgeState(id)) === "running", 30_000);
  return { id, name: sandboxName(id) };
}
const patch = (name: string, spec: object) => kubectlOk(["-n", sys.ns, "patch", name, "--type", "merge", "-p", JSON.stringify({ spec })]);

describe("auto-pause from the Sandbox CRD", () => {
  it("kubectl patch of probes + autoPausePolicy: busy keeps it running, idle pauses it on the edge", async () => {
    const { id, name } = await claimRunning();

    writeFileSync(activity, "busy\n");
    patch(name, {
      probes: [{ name: "activity", exec: { command: ["cat", activity] }, periodSeconds: 1, timeoutSeconds: 5 }],
      autoPausePolicy: { pause: { whenProbedIdleState: { probe: "activity", messageRegex: "^idle$", thresholdDuration: "2s" } } },
    });
    const admin = async () => ((await (await fetch(`${sys.edge.url}/admin/sandboxes/${id}`, { headers: { "x-api-key": sys.edge.adminKey } })).json()) as { autoPause?: { probe?: { message?: string }; pauses: number } }).autoPause;
    await until("the probe's first answer", async () => (await admin())?.probe?.message === "busy", 30_000);
    expect(await edgeState(id)).toBe("running");

    writeFileSync(activity, "idle\n");
    await until("paused by the probe", async () => (await edgeState(id)) === "paused", 30_000);
    // The probe's own count is stored once its pause call returns, which may be after the state shows.
    await until("the probe's pause counted", async () => (await admin())!.pauses === 1, 30_000);
  });
  it("kubectl removing the autoPausePolicy stops the edge's probe; a policy the agent cannot map is a Warning Event on the Sandbox and runs nothing", async () => {
    const { id, name } = await claimRunning();
    const admin = async () => ((await (await fetch(`${sys.edge.url}/admin/sandboxes/${id}`, { headers: { "x-api-key": sys.edge.adminKey } })).json()) as { autoPause: { probe?: { message?: string } } | null }).autoPause;

    writeFileSync(activity, "busy\n");
    const probes = [{ name: "activity", exec: { command: ["cat", activity] }, periodSeconds: 1, timeoutSeconds: 5 }];
    patch(name, { probes, autoPausePolicy: { pause: { whenProbedIdleState: { probe: "activity", messageRegex: "^idle$", thresholdDuration: "2s" } } } });
    await until("the probe's first answer", async () => (await admin())?.probe?.message === "busy", 30_000);

    kubectlOk(["-n", sys.ns, "patch", name, "--type", "json", "-p", JSON.stringify([{ op: "remove", path: "/spec/autoPausePolicy" }])]);
    await until("the edge's probe gone", async () => (await admin()) === null, 30_000);

    // A policy naming a probe the Sandbox does not have: said on the Sandbox, nothing probes.
    patch(name, { autoPausePolicy: { pause: { whenProbedIdleState: { probe: "missing", messageRegex: "^idle$", thresholdDuration: "2s" } } } });
    const sbxName = name.replace(/^.*\//, "");
    const warning = await until("a Warning Event on the Sandbox", () => {
      const events = JSON.parse(kubectlOk(["-n", sys.ns, "get", "events", "--field-selector", `involvedObject.name=${sbxName},reason=AutoPausePolicyNotApplied`, "-o", "json"])).items as { type: string; message: string }[];
      return events[0];
    }, 30_000);
    expect(warning).toMatchObject({ type: "Warning", message: expect.stringContaining('probe "missing"') });
    expect(await admin()).toBeNull();
    expect(await edgeState(id)).toBe("running");
  });

  it("resume.whenProbedScheduleTime: a resume probe whose output is no time keeps it running (said in the admin view); a time pauses it and it wakes leadTime before", async () => {
    const { id, name } = await claimRunning();
    const next = `${activity}-next`;
    const view = async () => ((await (await fetch(`${sys.edge.url}/admin/sandboxes/${id}`, { headers: { "x-api-key": sys.edge.adminKey } })).json()) as { autoPause: { held?: string; pauses: number; wakeAt: string | null } | null }).autoPause;
    try {
      writeFileSync(activity, "idle\n");
      writeFileSync(next, "not a time\n");
      patch(name, {
        probes: [
          { name: "activity", exec: { command: ["cat", activity] }, periodSeconds: 1, timeoutSeconds: 5 },
          { name: "next", exec: { command: ["cat", next] }, timeoutSeconds: 5 },
        ],
        autoPausePolicy: {
          pause: { whenProbedIdleState: { probe: "activity", messageRegex: "^idle$", thresholdDuration: "1s" } },
          resume: { whenProbedScheduleTime: { probe: "next", timeFormat: "unix", leadTime: "2s" } },
        },
      });
      const held = await until("the pause held by the resume probe", async () => (await view())?.held, 30_000);
      expect(held).toContain("not a unix time");
      expect(await edgeState(id)).toBe("running");
      // The next task 14 s away: it pauses, and wakes 2 s before it without any traffic.
      writeFileSync(next, `${Math.floor(Date.now() / 1000) + 14}\n`);
      await until("paused by the probe", async () => (await edgeState(id)) === "paused", 30_000);
      // Its wake is stored once the pause call returns, which may be after the state shows.
      await until("the wake time stored", async () => (await view())?.wakeAt, 30_000);
      await until("woken by the probed schedule", async () => (await edgeState(id)) === "running", 40_000);
    } finally {
      rmSync(next, { force: true });
      writeFileSync(activity, "busy\n");
    }
  }, 120_000);

  it("a policy, hooks and an update ops run removed with kubectl while the agent is down are gone from the edge once it is back; an E2B create's policy stays", async () => {
    const view = async (id: string) =>
      (await (await fetch(`${sys.edge.url}/admin/sandboxes/${id}`, { headers: { "x-api-key": sys.edge.adminKey } })).json()) as { autoPause: { probe?: { message?: string } } | null; lifecycle: Record<string, unknown> | null };
    writeFileSync(activity, "busy\n");
    const probes = [{ name: "activity", exec: { command: ["cat", activity] }, periodSeconds: 1, timeoutSeconds: 5 }];
    const { id, name } = await claimRunning();
    patch(name, {
      probes,
      autoPausePolicy: { pause: { whenProbedIdleState: { probe: "activity", messageRegex: "^idle$", thresholdDuration: "2s" } } },
      lifecycle: { prePause: { exec: { command: ["true"] } } },
    });
    await until("the probe and hooks on the edge", async () => {
      const v = await view(id);
      return v.autoPause?.probe?.message === "busy" && v.lifecycle?.prePause !== undefined;
    }, 30_000);
    // A sandbox whose policy came with its E2B create (metadata), not from its Sandbox.
    const policy = { probe: { exec: { command: ["cat", activity] }, periodSeconds: 1, timeoutSeconds: 5 }, messageRegex: "^idle$", thresholdDuration: "600s" };
    const made = await fetch(`${sys.edge.url}/sandboxes`, { method: "POST", headers: { "x-api-key": key, "content-type": "application/json" }, body: JSON.stringify({ templateID: "app", timeout: 600, metadata: { "e2b.agents.kruise.io/auto-pause-policy": JSON.stringify(policy) } }) });
    expect(made.status).toBe(201);
    const own = ((await made.json()) as { sandboxID: string }).sandboxID;
    await until("the E2B policy's probe answers", async () => (await view(own)).autoPause?.probe?.message === "busy", 30_000);
    // An update ops run that selects nothing: the edge holds it.
    kubectlOk(["-n", sys.ns, "apply", "-f", "-"], `apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxUpdateOps\nmetadata: { name: gone }\nspec:\n  selector: { matchLabels: { none: "here" } }\n`);
    const ops = () => fetch(`${sys.edge.url}/admin/teams/${sys.ns}/updateops/gone`, { headers: { "x-api-key": sys.edge.adminKey } });
    await until("the run on the edge", async () => (await ops()).status === 200, 30_000);

    await sys.restart(() => {
      kubectlOk(["-n", sys.ns, "patch", name, "--type", "json", "-p", JSON.stringify([{ op: "remove", path: "/spec/autoPausePolicy" }, { op: "remove", path: "/spec/lifecycle" }])]);
      kubectlOk(["-n", sys.ns, "delete", "sandboxupdateops", "gone", "--wait=false"]);
    });
    await until("the probe and hooks gone from the edge", async () => {
      const v = await view(id);
      return v.autoPause === null && v.lifecycle === null;
    }, 60_000);
    await until("the run gone from the edge", async () => (await ops()).status === 404, 60_000);
    expect((await view(own)).autoPause?.probe).toBeDefined();
  }, 180_000);
});
