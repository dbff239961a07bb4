// A RootfsStore in a temporary directory with a one-layer `base` template, for tests of the
// builder's bookkeeping (ENV-only builds, or steps mocked): no root needed.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { RootfsStore } from "../../../../../controllers/drivers/local/rootfs/store.ts";

/** Temporary directories, each removed by `removeTmp`. */
export function tmpDirs(prefix: string): { tmp(): string; removeTmp(): void } {
  const dirs: string[] = [];
  return {
    tmp: () => {
      const d = mkdtempSync(join(tmpdir(), prefix));
      dirs.push(d);
      return d;
    },
    removeTmp: () => {
      for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
    },
  };
}

export async function storeWithBase(root: string): Promise<RootfsStore> {
  const store = new RootfsStore(root);
  const staging = store.stagingDir("base-l");
  mkdirSync(join(staging, "rootfs"));
  writeFileSync(join(staging, "rootfs", "f"), "base");
  await store.commitLayer(staging, { id: "base-l", kind: "build", source: { step: "RUN", key: "base-l" } }, Date.now(), "", { bytes: 1000, files: 10 });
  store.putTemplate("base", ["base-l"]);
  return store;
}
