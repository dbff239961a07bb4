// Whether a start-up may keep code-interpreter's current build (scripts/lib/templates.ts
// isCurrentCodeInterpreter): only when the build's layers are the ones the definition's step keys
// give from base's layers now. A changed definition or a rebuilt base is built again.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { RootfsStore } from "../../../controllers/drivers/local/rootfs/store.ts";
import { codeInterpreterLayers, isCurrentCodeInterpreter } from "../../../scripts/lib/templates.ts";

const dir = mkdtempSync(join(tmpdir(), "ci-current-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const store = new RootfsStore(dir);
const layer = (id: string) => {
  mkdirSync(join(dir, "layers", id, "rootfs"), { recursive: true });
  writeFileSync(join(dir, "layers", id, "layer.json"), JSON.stringify({ id }));
};

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
  expect(await isCurrentCodeInterpreter(store, "b-current")).toBe(true);
  expect(await isCurrentCodeInterpreter(store, "b-older")).toBe(false);
  expect(await isCurrentCodeInterpreter(store, "b-gone")).toBe(false);
  expect(await isCurrentCodeInterpreter(store, "base")).toBe(false);
  layer("base-b");
  store.putTemplate("base", ["base-b"]);
  expect(await isCurrentCodeInterpreter(store, "b-current")).toBe(false);
});
