// Global setup of the local and e2e tiers: the Debian `base` root filesystem exists before any
// test, so the tests of a machine of its own run instead of skipping. Cached after the first
// build (`.ci/run` builds it first; on a fresh machine this builds it here, with progress).
import { ensureBaseRootfs, ensureCodeInterpreterRootfs } from "../../controllers/drivers/local/rootfs/build-base.ts";
import { RootfsStore } from "../../controllers/drivers/local/rootfs/store.ts";

export default async function setup(): Promise<void> {
  const base = await ensureBaseRootfs(new RootfsStore(), (line) => console.log(`[base rootfs] ${line}`));
  if (base.built) console.log(`[base rootfs] built ${base.id}`);
  // The code interpreter's template (base + Jupyter's Python kernel), for the runCode tests.
  const ci = await ensureCodeInterpreterRootfs(new RootfsStore(), (line) => console.log(`[code-interpreter rootfs] ${line}`));
  if (ci.built) console.log(`[code-interpreter rootfs] built ${ci.id}`);
}
