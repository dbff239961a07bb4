// Builds the project's templates on this machine (run as root), outside any test's timeout:
// `base` from its Debian recipe (controllers/drivers/local/rootfs/), then `code-interpreter` from
// `base` through the template builder (scripts/lib/templates.ts), each step cached by its key
// under ~/.cache/sandbox-edge/rootfs, so a second run takes seconds.
//   node scripts/prebuild-templates.ts            progress lines only
//   node scripts/prebuild-templates.ts --verbose  every line of every step
import { prebuildTemplates } from "./lib/templates.ts";

// Ctrl-C reaches the step's bwrap too (one process group), so the step ends; staying alive until
// the builder has removed its half-built layer and cgroup is all this needs. A second one quits.
let interrupted = false;
process.on("SIGINT", () => {
  if (interrupted) process.exit(130);
  interrupted = true;
  console.error("[prebuild] stopping (Ctrl-C): removing the step's half-built layer");
});
try {
  await prebuildTemplates((line) => console.log(line), { progress: !process.argv.includes("--verbose") });
} catch (err) {
  console.error(`[prebuild] ${(err as Error).message}`);
  process.exitCode = interrupted ? 130 : 1;
}
