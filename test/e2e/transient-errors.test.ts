// The error model through the whole system (edge on workerd, the agent's real reconciler, link
// and local driver, the real e2b SDK): a driver failure that clears is retried and the create
// still answers 201; one that does not clear within the create's bound answers 5xx with the
// agent's condition; a terminal one fails the create at once with its message. A pause the driver
// takes a while over is answered once done, so a snapshot right after it is taken. This file runs
// its own system: its agent runs in this process so its driver can be made to fail or stall.
import { Sandbox } from "e2b";
import { clusterTokenFor } from "../../schema/protocol/cluster-token.ts";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startAgent, type Agent } from "../../controllers/agent/agent.ts";
import { lockDataDir } from "../../controllers/agent/data-dir-lock.ts";
import { LocalDriver } from "../../controllers/drivers/local/local-driver.ts";
import { startSystem, type System } from "../../scripts/lib/system.ts";
import { faultyDriver, type FaultyDriver } from "../support/faulty-driver.ts";
import { waitFor } from "../support/wait-for.ts";

const EXT = "e2b.agents.kruise.io/";
let sys: System;
let dataDir: string;
let agent: Agent;
let faulty: FaultyDriver;
const opts = () => ({ apiKey: sys.apiKey, apiUrl: sys.apiUrl, sandboxUrl: sys.apiUrl, requestTimeoutMs: 30_000 });

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), "sbx-transient-"));
  sys = await startSystem({ dataDir, baseReplicas: 1 });
  // The same agent installation (id, data, ingress port), now in this process with a faulty driver.
  await sys.stopAgent();
  const agentDir = join(dataDir, "agent");
  const id = readFileSync(join(agentDir, "agent-id"), "utf8").trim();
  // As main.ts: the data dir's lock before the driver touches it (writes its init, sweeps trash).
  const dataDirLock = lockDataDir(agentDir);
  faulty = faultyDriver(new LocalDriver({ dataDir: join(agentDir, "local"), cgroupName: `kruise-${id.slice(-12)}` }));
  agent = await startAgent({ edgeUrl: sys.apiUrl, clusterToken: await clusterTokenFor(sys.secrets.clusterToken, "local"), dataDir: agentDir, dataDirLock, ingressPort: sys.secrets.ingressPort, driver: faulty.driver, log: () => {} });
  await agent.link.whenConnected();
});

afterAll(async () => {
  await agent?.stop("destroy");
  await sys?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

/** The one sandbox that asked for `fault`. */
function faultedSandbox(fault: string): [string, { calls: number; thrown: number }] {
  const found = [...faulty.calls].filter(([, c]) => c.fault === fault);
  expect(found).toHaveLength(1);
  return found[0]!;
}

async function gone(id: string): Promise<void> {
  await waitFor(async () => !(await agent.driver.list()).some((o) => o.id === id), { what: `sandbox ${id} destroyed by the driver` });
}

describe("driver errors", () => {
  it("a driver that fails 3 times then succeeds keeps the sandbox: the create answers 201 and the sandbox works", async () => {
    const sbx = await Sandbox.create({ ...opts(), metadata: { fault: "transient:3" } });
    expect(faulty.calls.get(sbx.sandboxId)).toMatchObject({ thrown: 3 });
    expect(faulty.calls.get(sbx.sandboxId)!.calls).toBeGreaterThan(3);
    expect((await sbx.commands.run("echo alive")).stdout).toBe("alive\n");
    expect((await Sandbox.getInfo(sbx.sandboxId, opts())).state).toBe("running");
    await sbx.kill();
  });

  it("a failure that does not clear within the create's bound answers 5xx with the agent's condition, and the sandbox is removed", async () => {
    const err = await Sandbox.create({ ...opts(), metadata: { fault: "transient:1000", [`${EXT}wait-ready-timeout-seconds`]: "2" } }).then(
      () => new Error("created"),
      (e: Error) => e,
    );
    expect(err.message).toMatch(/ReconcileError: cgroup write failed: EBUSY \(injected \d+ of 1000\) \(attempt \d+, retrying in \d+ ms\)/);
    const [id, c] = faultedSandbox("transient:1000");
    expect(c.thrown).toBeGreaterThan(1); // it was retried, not failed at once
    await gone(id);
  });

  it("a terminal error fails the create at once with its message, without a retry", async () => {
    const err = await Sandbox.create({ ...opts(), metadata: { fault: "terminal" } }).then(
      () => new Error("created"),
      (e: Error) => e,
    );
    expect(err.message).toMatch(/ImageNotFound.*image "nope:latest" cannot exist/);
    const [id, c] = faultedSandbox("terminal");
    expect(c.calls).toBe(1);
    await gone(id);
  });
});

describe("a slow pause", () => {
  it("answers once the driver has paused the sandbox: right after, it is paused there and a snapshot of it is taken", async () => {
    const sbx = await Sandbox.create({ ...opts(), metadata: { fault: "slow-pause:1500" } });
    await sbx.files.write("/home/user/before.txt", "before the pause");
    expect(await sbx.pause()).toBe(true);
    // Still running in the driver, and a snapshot refused with 409 "is pausing", if the pause
    // answered before the agent carried it out.
    expect((await agent.driver.list()).find((o) => o.id === sbx.sandboxId)?.phase).toBe("Paused");
    const snap = await sbx.createSnapshot();
    expect((await Sandbox.getInfo(sbx.sandboxId, opts())).state).toBe("paused");
    const copy = await Sandbox.create(snap.snapshotId, opts());
    expect(await copy.files.read("/home/user/before.txt")).toBe("before the pause");
    await copy.kill();
    await sbx.kill();
  });
});
