// A start-up of the system (`npm start`, the test systems: scripts/lib/system.ts) builds the
// code-interpreter template through the edge's build API only when its definition or base changed:
// a second start-up against the same data directory keeps the build, its record and the warm
// pool's revision, and runCode works at once. Runs its own system (it restarts the whole of it).
// Real @e2b/code-interpreter SDK.
import { Sandbox } from "@e2b/code-interpreter";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { RootfsStore } from "../../controllers/drivers/local/rootfs/store.ts";
import { ADMIN_TEAM_NAME } from "../../schema/api/api-key.ts";
import { startSystem, type System } from "../../scripts/lib/system.ts";

let sys: System | undefined;
const dataDir = mkdtempSync(join(tmpdir(), "sbx-ci-startup-"));
const images = new Set<string>();
afterAll(async () => {
  await sys?.stop();
  rmSync(dataDir, { recursive: true, force: true });
  // This system's build records leave the shared store (their layers are the tiers' setup's).
  for (const image of images) rmSync(join(new RootfsStore().root, "templates", `${image}.json`), { force: true });
});

async function get<T>(path: string): Promise<T> {
  const res = await fetch(`${sys!.apiUrl}${path}`, { headers: { "x-api-key": sys!.apiKey } });
  if (!res.ok) throw new Error(`GET ${path}: ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}

/** What a start-up leaves: the build records, and each name's image and revision. */
async function state() {
  const builds = (await get<{ builds: { buildID: string; status: string }[] }>("/templates/code-interpreter")).builds;
  const named = async (name: string) => {
    const t = await get<{ revision: string; spec: { image: string }; pool: { updateRevision: string | null } }>(`/admin/teams/${ADMIN_TEAM_NAME}/templates/${name}`);
    return { image: t.spec.image, revision: t.revision, poolRevision: t.pool.updateRevision };
  };
  for (const b of builds) images.add(`b-${b.buildID}`);
  return { builds, v1: await named("code-interpreter-v1"), plain: await named("code-interpreter") };
}

it("a second start-up against the same data directory keeps the code-interpreter build and its pool: one build record, same image and revision; runCode works", { timeout: 600_000 }, async () => {
  sys = await startSystem({ dataDir, baseReplicas: 0, codeInterpreterReplicas: 1 });
  const first = await state();
  expect(first.builds).toMatchObject([{ status: "ready" }]);
  expect(first.v1.image).toBe(`b-${first.builds[0]!.buildID}`);
  await sys.stop();
  sys = undefined;

  sys = await startSystem({ dataDir, baseReplicas: 0, codeInterpreterReplicas: 1, skipBuild: true });
  const second = await state();
  expect(second).toEqual(first);
  const opts = { apiKey: sys.apiKey, apiUrl: sys.apiUrl, sandboxUrl: sys.apiUrl, requestTimeoutMs: 60_000 };
  const sbx = await Sandbox.create(opts);
  try {
    expect((await sbx.runCode("1 + 1")).text).toBe("2");
  } finally {
    await sbx.kill();
  }
});
