// A template build in progress when the agent dies is resumed when the agent starts again (issue
// 12.1): the agent keeps the builds it was handed on disk until their result is delivered; a new
// agent process starts them again, the finished steps come from the layer cache, the cut step
// runs again, and the build ends ready with the log saying what happened (never `building`
// forever). Real e2b JS SDK (Template.buildInBackground / getBuildStatus). And a template
// re-pointed while the agent is down frees the old build's image once it is back (review N5).
// Its own system, because it kills the agent.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox, Template } from "e2b";
import { afterAll, beforeAll, expect, it } from "vitest";
import { RootfsStore } from "../../controllers/drivers/local/rootfs/store.ts";
import { startSystem, type System } from "../../scripts/lib/system.ts";
import { removeBuiltLayers } from "../support/built-layers.ts";
import { uniqueTag } from "./sdk.ts";

const store = new RootfsStore();
const startedAt = Date.now();
const outputs: string[] = [];
let sys: System;
let dataDir: string;
const opts = () => ({ apiKey: sys.apiKey, apiUrl: sys.apiUrl, sandboxUrl: sys.apiUrl, requestTimeoutMs: 30_000 });

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), "sbx-build-restart-"));
  // A freed built image is kept 2 s for creates under way (5 minutes by default).
  sys = await startSystem({ dataDir, edgeVars: { IMAGE_FREE_GRACE_MS: "2000" } });
});
afterAll(async () => {
  await sys?.stop();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  await removeBuiltLayers(store, outputs, startedAt);
});

it("a build cut by an agent kill -9 is resumed by the next agent and ends ready", { timeout: 180_000 }, async () => {
  const run = uniqueTag();
  const name = `tpl-restart-${run}`;
  const t = Template()
    .fromBaseImage()
    .setEnvs({ RUN_ID: run })
    .runCmd("echo one > /one.txt", { user: "root" })
    // Long enough that the agent is killed while it runs.
    .runCmd("echo before-kill; sleep 8; echo two > /two.txt", { user: "root" });
  const built = await Template.buildInBackground(t, name, opts());
  outputs.push(`b-${built.buildId}`);
  const messages = async () => (await Template.getBuildStatus(built, { ...opts(), logsOffset: 0 })).logEntries.map((l) => l.message);
  await expect.poll(messages, { timeout: 60_000, interval: 200 }).toContain("before-kill");

  await sys.stopAgent("SIGKILL");
  await sys.startAgent();

  await expect.poll(async () => (await Template.getBuildStatus(built, opts())).status, { timeout: 120_000, interval: 500 }).toBe("ready");
  const logs = await messages();
  expect(logs).toContain("The agent restarted during this build: resuming it (finished steps are cached)");
  expect(logs.some((m) => m.startsWith("CACHED") && m.includes("echo one"))).toBe(true);
  // The cut step ran again in full: its first line twice (before and after the restart).
  expect(logs.filter((m) => m === "before-kill")).toHaveLength(2);

  const sbx = await Sandbox.create(name, opts());
  try {
    expect((await sbx.commands.run("cat /one.txt /two.txt")).stdout).toBe("one\ntwo\n");
  } finally {
    await sbx.kill();
  }
});

it("a template re-pointed while the agent is down is applied at once, and the old build's record goes when the agent is back", { timeout: 180_000 }, async () => {
  const run = uniqueTag();
  const name = `tpl-repoint-${run}`;
  const built = await Template.build(Template().fromBaseImage().setEnvs({ RUN_ID: run }).runCmd(`echo ${run} > /mine.txt`, { user: "root" }), name, opts());
  const image = `b-${built.buildId}`;
  outputs.push(image);
  expect(store.template(image)).toBeDefined();
  const headers = { "x-api-key": sys.apiKey, "content-type": "application/json" };
  const team = ((await (await fetch(`${sys.apiUrl}/teams`, { headers })).json()) as { name: string; isDefault: boolean }[]).find((t) => t.isDefault)!;
  const path = `${sys.apiUrl}/admin/teams/${team.name}/templates/${name}`;
  const spec = ((await (await fetch(path, { headers })).json()) as { spec: Record<string, unknown> }).spec;

  await sys.stopAgent();
  try {
    const put = await fetch(path, { method: "PUT", headers, body: JSON.stringify({ spec: { ...spec, image: "base" } }) });
    expect(put.status).toBe(200);
    expect(store.template(image)).toBeDefined();
  } finally {
    await sys.startAgent();
  }
  await expect.poll(() => store.template(image), { timeout: 60_000, interval: 200 }).toBeUndefined();
  const sbx = await Sandbox.create(name, opts());
  try {
    expect((await sbx.commands.run("test -e /mine.txt || echo base")).stdout).toBe("base\n");
  } finally {
    await sbx.kill();
  }
});
