// Global setup of the local and e2e tiers: the Debian `base` root filesystem exists before any
// test, so the tests of a machine of its own run instead of skipping. Cached after the first
// build (`.ci/run` builds it first; on a fresh machine this builds it here, with progress).
import { ensureBaseRootfs } from "../../controllers/drivers/local/rootfs/build-base.ts";
import { RootfsStore } from "../../controllers/drivers/local/rootfs/store.ts";
import { buildCodeInterpreter } from "../../scripts/lib/templates.ts";

export default async function setup(): Promise<void> {
  const base = await ensureBaseRootfs(new RootfsStore(), (line) => console.log(`[base rootfs] ${line}`));
  if (base.built) console.log(`[base rootfs] built ${base.id}`);
  // The code interpreter's template, built from base by the template builder (cached by step key:
  // seconds when `.ci/run` built it), for the runCode tests.
  const ci = await buildCodeInterpreter((line) => console.log(`[code-interpreter] ${line}`), { progress: true });
  if (ci.ran) console.log(`[code-interpreter] built ${ci.ran} step(s) in ${ci.seconds} s`);
}
