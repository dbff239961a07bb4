// `npm test`: the one test command (README, .ci/run). Checks that dependencies point one way
// (`npm run lint:deps`), starts a real sqld on loopback, runs every vitest project against it,
// then the Python SDK compatibility suite when its venv exists (.ci/run and
// scripts/setup-python.sh create it). Extra arguments go to vitest, e.g.
// `npm test -- --project unit`.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { startSqld } from "./lib/sqld.ts";
import { add, junitCounts, reportSummary, runVitest } from "./lib/test-summary.ts";

const root = resolve(import.meta.dirname, "..");

const deps = spawnSync("npm", ["run", "--silent", "lint:deps"], { cwd: root, encoding: "utf8" });
if (deps.status !== 0) {
  process.stdout.write(deps.stdout);
  reportSummary(1, { passed: 0, failed: 1 });
  process.exit(1);
}
console.log(deps.stdout.split("\n").find((l) => l.includes("dependencies cruised"))?.trim() ?? "dependencies: checked");
const dir = mkdtempSync(join(tmpdir(), "sbx-test-"));
const sqld = await startSqld({ dir });
const env = { ...process.env, LIBSQL_URL: sqld.url, CLOUDFLARE_CF_FETCH_ENABLED: "false", WRANGLER_SEND_METRICS: "false" };

let status = 0;
let counts = { passed: 0, failed: 0 };
try {
  const args = process.argv.slice(2);
  const vitest = runVitest(args, { cwd: root, env });
  status = vitest.status;
  counts = add(counts, vitest.counts);

  const pytest = join(root, ".cache/venv/bin/pytest");
  const onlyVitest = args.some((a) => a.startsWith("--project"));
  if (status === 0 && !onlyVitest && existsSync(pytest) && existsSync(join(root, "test/python"))) {
    const junit = join(dir, "pytest.xml");
    const py = spawnSync(pytest, ["-q", `--junitxml=${junit}`, "test/python"], { stdio: "inherit", env, cwd: root });
    status = py.status ?? 1;
    counts = add(counts, junitCounts(junit));
  }
} finally {
  await sqld.stop();
  rmSync(dir, { recursive: true, force: true });
}
reportSummary(status, counts);
process.exit(status);
