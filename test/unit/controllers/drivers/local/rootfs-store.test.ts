// The layer store's private directories: a build's staging directory holds a step's tree (the
// tenant's, set-uid files included) and the layer it becomes keeps it; neither is open to other
// host users, wherever the store is (SBX_ROOTFS_DIR need not be under root's home).
import { mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { RootfsStore } from "../../../../../controllers/drivers/local/rootfs/store.ts";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe("RootfsStore staging", () => {
  it("makes a build's staging directory 0700, and the layer it is published as stays 0700", async () => {
    const root = mkdtempSync(join(tmpdir(), "rootfs-store-"));
    dirs.push(root);
    const store = new RootfsStore(root);
    const staging = store.stagingDir("step-a");
    expect(statSync(staging).mode & 0o777).toBe(0o700);
    mkdirSync(join(staging, "rootfs"));
    writeFileSync(join(staging, "rootfs", "f"), "x");
    await store.commitLayer(staging, { id: "step-a", kind: "build", source: {} }, Date.now(), "");
    expect(statSync(store.layerDir("step-a")).mode & 0o777).toBe(0o700);
  });
});
