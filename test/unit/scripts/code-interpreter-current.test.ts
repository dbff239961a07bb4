// Whether a start-up may keep code-interpreter's current build (scripts/lib/templates.ts
// isCurrentCodeInterpreter): only when the build's layers are the ones the definition's step keys
// give from base's layers now, and its spec's user, workdir, env and start/ready commands are the
// definition's. A changed definition (even one that adds no layer) or a rebuilt base is built again.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { RootfsStore } from "../../../controllers/drivers/local/rootfs/store.ts";
import { waitForFile } from "e2b";
import { TemplateSpec } from "../../../schema/api/template.ts";
import { codeInterpreterLayers, codeInterpreterTemplate, isCurrentCodeInterpreter } from "../../../scripts/lib/templates.ts";

const dir = mkdtempSync(join(tmpdir(), "ci-current-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const store = new RootfsStore(dir);
const built = (image: string, more: Partial<TemplateSpec> = {}) => TemplateSpec.parse({ image, ...more });
const layerIn = (d: string) => (id: string) => {
  mkdirSync(join(d, "layers", id, "rootfs"), { recursive: true });
  writeFileSync(join(d, "layers", id, "layer.json"), JSON.stringify({ id }));
};
const layer = layerIn(dir);

it("keeps a build of the current definition and base; not one of another definition, another base, or a missing one", async () => {
  expect(await codeInterpreterLayers(store)).toBeUndefined();
  layer("base-a");
  store.putTemplate("base", ["base-a"]);
  const planned = (await codeInterpreterLayers(store))!;
  expect(planned[0]).toBe("base-a");
  expect(planned.length).toBeGreaterThan(1);
  planned.slice(1).forEach(layer);
  store.putTemplate("b-current", planned);
  store.putTemplate("b-older", planned.slice(0, -1));
  expect(await isCurrentCodeInterpreter(store, built("b-current"))).toBe(true);
  expect(await isCurrentCodeInterpreter(store, built("b-older"))).toBe(false);
  expect(await isCurrentCodeInterpreter(store, built("b-gone"))).toBe(false);
  expect(await isCurrentCodeInterpreter(store, built("base"))).toBe(false);
  layer("base-b");
  store.putTemplate("base", ["base-b"]);
  expect(await isCurrentCodeInterpreter(store, built("b-current"))).toBe(false);
});

it("builds again a definition whose change adds no layer: a start/ready command, a trailing env, user or workdir", async () => {
  const d = mkdtempSync(join(tmpdir(), "ci-current-cfg-"));
  try {
    const s = new RootfsStore(d);
    const put = layerIn(d);
    put("base-a");
    s.putTemplate("base", ["base-a"]);
    const start = (t: ReturnType<typeof codeInterpreterTemplate>) => t.setStartCmd("jupyter-start", waitForFile("/tmp/ready"));
    const withStart = () => start(codeInterpreterTemplate());
    const planned = (await codeInterpreterLayers(s, withStart()))!;
    // None of these changes adds a layer: every variant plans the same layers as the kept build.
    expect(await codeInterpreterLayers(s)).toEqual(planned);
    planned.slice(1).forEach(put);
    s.putTemplate("b-started", planned);
    const spec = built("b-started", { startCmd: "jupyter-start", readyCmd: "[ -f /tmp/ready ]" });
    expect(await isCurrentCodeInterpreter(s, spec, withStart())).toBe(true);
    // Only the start command differs.
    const otherStart = codeInterpreterTemplate().setStartCmd("jupyter-start --other", waitForFile("/tmp/ready"));
    expect(await isCurrentCodeInterpreter(s, spec, otherStart)).toBe(false);
    // Only the ready command differs.
    const otherReady = codeInterpreterTemplate().setStartCmd("jupyter-start", waitForFile("/tmp/other"));
    expect(await isCurrentCodeInterpreter(s, spec, otherReady)).toBe(false);
    // The definition dropped its start command: the kept one was the old definition's, not base's.
    expect(await isCurrentCodeInterpreter(s, built("b-started"), withStart())).toBe(false);
    // A trailing env, user or workdir: no layer for ENV/USER; WORKDIR makes one, so it is the layers' check.
    const withEnv = start(codeInterpreterTemplate().setEnvs({ MPLBACKEND: "Agg" }));
    expect(await codeInterpreterLayers(s, withEnv)).toEqual(planned);
    expect(await isCurrentCodeInterpreter(s, spec, withEnv)).toBe(false);
    expect(await isCurrentCodeInterpreter(s, { ...spec, env: { MPLBACKEND: "Agg" } }, withEnv)).toBe(true);
    const withUser = start(codeInterpreterTemplate().setUser("root"));
    expect(await codeInterpreterLayers(s, withUser)).toEqual(planned);
    expect(await isCurrentCodeInterpreter(s, spec, withUser)).toBe(false);
    expect(await isCurrentCodeInterpreter(s, { ...spec, user: "root" }, withUser)).toBe(true);
  } finally {
    rmSync(d, { recursive: true, force: true });
  }
});
