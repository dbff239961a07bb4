// Counts of passed and failed tests, collected from each runner's machine-readable report, so a
// run ends with one plain line a person (and CI) can read: `tests: N passed, M failed`.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

export interface Counts {
  passed: number;
  failed: number;
}

/** From vitest's `--reporter=json --outputFile=FILE`. */
export function vitestCounts(file: string): Counts {
  if (!existsSync(file)) return { passed: 0, failed: 0 };
  const r = JSON.parse(readFileSync(file, "utf8")) as { numPassedTests: number; numFailedTests: number };
  return { passed: r.numPassedTests, failed: r.numFailedTests };
}

/** From pytest's `--junitxml=FILE` (the testsuite element's attributes). */
export function junitCounts(file: string): Counts {
  if (!existsSync(file)) return { passed: 0, failed: 0 };
  const xml = readFileSync(file, "utf8");
  const attr = (name: string) => Number(new RegExp(`<testsuite[^>]*\\s${name}="(\\d+)"`).exec(xml)?.[1] ?? 0);
  const failed = attr("failures") + attr("errors");
  return { passed: attr("tests") - failed - attr("skipped"), failed };
}

export function add(a: Counts, b: Counts): Counts {
  return { passed: a.passed + b.passed, failed: a.failed + b.failed };
}

export const summaryLine = (c: Counts) => `tests: ${c.passed} passed, ${c.failed} failed`;

const VITEST = resolve(import.meta.dirname, "../../node_modules/.bin/vitest");

/** `vitest run` with the usual output plus a JSON report, so the caller gets the counts too. */
export function runVitest(args: string[], opts: { cwd: string; env?: NodeJS.ProcessEnv }): { status: number; counts: Counts } {
  const dir = mkdtempSync(join(tmpdir(), "sbx-vitest-"));
  try {
    const report = join(dir, "vitest.json");
    const res = spawnSync(VITEST, ["run", "--reporter=default", "--reporter=json", `--outputFile.json=${report}`, ...args], { stdio: "inherit", cwd: opts.cwd, env: opts.env });
    return { status: res.status ?? 1, counts: vitestCounts(report) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Prints the closing line (a runner that failed without reporting counts as one failure) and,
 * when TEST_SUMMARY_FILE is set, leaves the counts there for .ci/run's total. */
export function reportSummary(status: number, counts: Counts): void {
  const final = status !== 0 && counts.failed === 0 ? { ...counts, failed: 1 } : counts;
  console.log(summaryLine(final));
  if (process.env.TEST_SUMMARY_FILE) writeFileSync(process.env.TEST_SUMMARY_FILE, JSON.stringify(final));
}
