// Builds the project's templates on this machine (run as root), outside any test's timeout:
// `base` from its Debian recipe (controllers/drivers/local/rootfs/), then `code-interpreter` from
// `base` through the template builder (scripts/lib/templates.ts), each step cached by its key
// under ~/.cache/sandbox-edge/rootfs, so a second run takes seconds.
//   node scripts/prebuild-templates.ts            progress lines only
//   node scripts/prebuild-templates.ts --verbose  every line of every step
import { ensureBaseRootfs } from "../controllers/drivers/local/rootfs/build-base.ts";
import { buildCodeInterpreter } from "./lib/templates.ts";

const verbose = process.argv.includes("--verbose");
try {
  const base = await ensureBaseRootfs(undefined, (line) => console.log(`[rootfs] ${line}`));
  console.log(`[rootfs] ${base.built ? "built" : "cached"}: base`);
  const ci = await buildCodeInterpreter((line) => console.log(`[code-interpreter] ${line}`), { progress: !verbose });
  console.log(`[code-interpreter] ready in ${ci.seconds} s: ${ci.ran} step(s) built, ${ci.cached} cached`);
} catch (err) {
  console.error(`[prebuild] ${(err as Error).message}`);
  process.exitCode = 1;
}
