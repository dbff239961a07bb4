// Global setup of the local and e2e tiers: the Debian `base` root filesystem and the
// code-interpreter template built from it exist before any test, outside the tests' timeouts, so
// the tests of a machine of its own and the runCode tests run instead of skipping. Cached (by
// recipe hash and step key) after the first build: `.ci/run` builds them first; on a fresh machine
// this builds them here, with progress.
import { prebuildTemplates } from "../../scripts/lib/templates.ts";

export default async function setup(): Promise<void> {
  await prebuildTemplates((line) => console.log(line), { progress: true });
}
