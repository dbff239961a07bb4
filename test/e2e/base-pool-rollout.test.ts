// `npm start` serves sandboxes while `base`'s root filesystem is still being built: the warm
// pool's members made meanwhile run on the host's view. Once the build is there, the template is
// re-put with the build's `rootfsId` (what scripts/start.ts does, through the admin API): a new
// revision, so the pool replaces its unclaimed members, and a new claim gets the root filesystem,
// while a sandbox claimed before keeps running as it was. Runs its own system, with a root
// filesystem store of its own in which `base` appears during the test (its layers are the ones
// the tier's global setup built). Real e2b JS SDK.
import { Sandbox } from "e2b";
import { mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TEAM_NAME } from "../../schema/api/api-key.ts";
import { RootfsStore } from "../../controllers/drivers/local/rootfs/store.ts";
import { startSystem, type System } from "../../scripts/lib/system.ts";
import { putTemplateRootfs } from "../../scripts/seed.ts";
import { poolSettled, type PoolView } from "./sdk.ts";

const built = new RootfsStore();
let sys: System;
let dataDir: string;
let storeDir: string;
const opts = () => ({ apiKey: sys.apiKey, apiUrl: sys.apiUrl, sandboxUrl: sys.apiUrl, requestTimeoutMs: 30_000 });

async function base(): Promise<{ revision: string; spec: { rootfsId?: string }; pool: PoolView }> {
  const res = await fetch(`${sys.apiUrl}/admin/teams/${ADMIN_TEAM_NAME}/templates/base`, { headers: { "x-api-key": sys.apiKey } });
  expect(res.status).toBe(200);
  return (await res.json()) as { revision: string; spec: { rootfsId?: string }; pool: PoolView };
}


/** Which `/` the sandbox sees: base has python-is-python3, the host has no `python`. */
async function view(sbx: Sandbox): Promise<string> {
  return (await sbx.commands.run("if [ -e /usr/bin/python ]; then echo rootfs; else echo host; fi")).stdout.trim();
}

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), "sbx-pool-rollout-"));
  storeDir = mkdtempSync(join(tmpdir(), "sbx-pool-rollout-store-"));
  // The built layers, but no templates yet: `base` is "still building".
  symlinkSync(join(built.root, "layers"), join(storeDir, "layers"));
  sys = await startSystem({ dataDir, rootfsDir: storeDir, baseReplicas: 2 });
});
afterAll(async () => {
  await sys?.stop();
  for (const dir of [dataDir, storeDir]) if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("the base pool once its root filesystem is built", { timeout: 240_000 }, () => {
  it("unclaimed members made on the host's view are replaced; a new claim gets the root filesystem; one claimed before keeps running", async () => {
    const layers = built.template("base")?.layers;
    expect(layers, `base is built by the tier's global setup in ${built.root}`).toBeDefined();
    await expect.poll(async () => poolSettled((await base()).pool), { timeout: 60_000, interval: 250 }).toBe(true);
    const before = await base();
    expect(before.spec.rootfsId).toBeUndefined();

    const early = await Sandbox.create(opts());
    try {
      expect(await view(early)).toBe("host");
      const sleeper = await early.commands.run("sleep 3600", { background: true });

      // The build is there: the store gets its template record, and the template names it.
      const store = new RootfsStore(storeDir);
      store.putTemplate("base", layers!);
      const rootfsId = store.rootfsId("base")!;
      expect(rootfsId).toBe(layers!.join("."));
      await putTemplateRootfs(sys.apiUrl, sys.apiKey, "base", rootfsId);
      const after = await base();
      expect(after.spec.rootfsId).toBe(rootfsId);
      expect(after.revision).not.toBe(before.revision);
      expect(after.pool.replicas).toBe(2);
      await expect.poll(async () => poolSettled((await base()).pool), { timeout: 120_000, interval: 250 }).toBe(true);

      const late = await Sandbox.create(opts());
      try {
        expect(await view(late)).toBe("rootfs");
        expect((await late.commands.run("python -c 'print(6*7)'")).stdout).toBe("42\n");
      } finally {
        await late.kill();
      }
      // The sandbox claimed before was not touched: same view, its process still there.
      expect(await view(early)).toBe("host");
      expect((await early.commands.run(`kill -0 ${sleeper.pid} && echo alive`)).stdout).toBe("alive\n");
    } finally {
      await early.kill();
    }
  });
});
