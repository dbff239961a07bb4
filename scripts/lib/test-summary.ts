// Counts of passed and failed tests, collected from each runner's machine-readable report, so a
// run ends with one plain line a person (and CI) can read: `tests: N passed, M failed`.
import { existsSync, readFileSync } from "node:fs";

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
