// `npm run test:kube`: the Kubernetes tier. Builds (or finds cached) kube-apiserver and etcd with
// tools/kube/build.sh, checks k8s/crd matches schema/crd/definitions.ts, then runs the `kube`
// vitest project (vitest.kube.config.ts). Extra arguments go to vitest.
import { spawnSync } from "node:child_process";
import { join, resolve } from "node:path";
import { reportSummary, runVitest } from "./lib/test-summary.ts";

const root = resolve(import.meta.dirname, "..");
const build = spawnSync("bash", [join(root, "tools/kube/build.sh")], { stdio: ["ignore", "pipe", "inherit"], encoding: "utf8" });
if (build.status !== 0) process.exit(build.status ?? 1);
console.log(`kube binaries: ${build.stdout.trim().split("\n").pop()}`);

const node = process.execPath;
const check = spawnSync(node, [join(root, "scripts/gen-crds.ts"), "--check"], { stdio: "inherit", cwd: root });
if (check.status !== 0) {
  console.error("k8s/crd is stale: run `node scripts/gen-crds.ts`");
  process.exit(1);
}
const vitest = runVitest(["--config", "vitest.kube.config.ts", ...process.argv.slice(2)], { cwd: root });
reportSummary(vitest.status, vitest.counts);
process.exit(vitest.status);
