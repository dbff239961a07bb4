// A template's `rootfsId` (the identity of the root filesystem its image names where the pool
// runs) is part of its revision, so naming a new build rolls the pool; RootfsStore computes it,
// and only once every layer of the template is there.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { RootfsStore } from "../../../controllers/drivers/local/rootfs/store.ts";
import { templateRevision, TemplateSpec } from "../../../schema/api/template.ts";

const dir = mkdtempSync(join(tmpdir(), "sbx-rootfs-id-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function fakeLayer(store: RootfsStore, id: string): void {
  mkdirSync(store.layerTree(id), { recursive: true });
  writeFileSync(join(store.layerDir(id), "layer.json"), JSON.stringify({ id }));
}

describe("template rootfsId", () => {
  it("changes the revision (a new build rolls the pool); the same id keeps it", () => {
    const host = templateRevision(TemplateSpec.parse({ replicas: 2 }));
    const built = templateRevision(TemplateSpec.parse({ replicas: 2, rootfsId: "debian-bookworm-ffe33e51d2a339be47c80f10" }));
    expect(built).not.toBe(host);
    expect(templateRevision(TemplateSpec.parse({ replicas: 5, rootfsId: "debian-bookworm-ffe33e51d2a339be47c80f10" }))).toBe(built);
    expect(templateRevision(TemplateSpec.parse({ rootfsId: "debian-bookworm-0000" }))).not.toBe(built);
  });

  it("is bounded and validated", () => {
    const bad = TemplateSpec.safeParse({ rootfsId: "../etc" });
    expect(bad.success).toBe(false);
    expect(bad.error?.issues[0]?.message).toMatch(/rootfsId is \[a-z0-9.-\]/);
    expect(TemplateSpec.safeParse({ rootfsId: "a".repeat(257) }).success).toBe(false);
  });

  it("RootfsStore.rootfsId: the layer ids joined, only once the template and all its layers are there", async () => {
    const store = new RootfsStore(join(dir, "store"));
    expect(store.rootfsId("base")).toBeUndefined();
    fakeLayer(store, "bottom-1");
    fakeLayer(store, "top-2");
    store.putTemplate("base", ["bottom-1", "top-2"]);
    expect(store.rootfsId("base")).toBe("bottom-1.top-2");
    await store.removeLayer("top-2");
    expect(store.rootfsId("base")).toBeUndefined();
  });
});
