// `npm test`: the one test command (README, .ci/run). Starts a real sqld on loopback, runs every
// vitest project against it, then the Python SDK compatibility suite when its venv exists
// (.ci/run and scripts/setup-python.sh create it). Extra arguments go to vitest, e.g.
// `npm test -- --project unit`.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { startSqld } from "./lib/sqld.ts";
import { add, junitCounts, summaryLine, vitestCounts } from "./lib/test-summary.ts";

const root = resolve(import.meta.dirname, "..");
const dir = mkdtempSync(join(tmpdir(), "sbx-test-"));
const sqld = await startSqld({ dir });
const env = { ...process.env, LIBSQL_URL: sqld.url, CLOUDFLARE_CF_FETCH_ENABLED: "false", WRANGLER_SEND_METRICS: "false" };

let status = 0;
let counts = { passed: 0, failed: 0 };
try {
  const args = process.argv.slice(2);
  const report = join(dir, "vitest.json");
  const reporters = ["--reporter=default", "--reporter=json", `--outputFile.json=${report}`];
  const vitest = spawnSync(join(root, "node_modules/.bin/vitest"), ["run", ...reporters, ...args], { stdio: "inherit", env, cwd: root });
  status = vitest.status ?? 1;
  counts = add(counts, vitestCounts(report));

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
// A runner that crashed before reporting counts as a failure.
if (status !== 0 && counts.failed === 0) counts.failed = 1;
console.log(summaryLine(counts));
if (process.env.TEST_SUMMARY_FILE) writeFileSync(process.env.TEST_SUMMARY_FILE, JSON.stringify(counts));
process.exit(status);
