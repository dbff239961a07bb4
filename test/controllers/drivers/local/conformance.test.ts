// The driver conformance suite against the local driver at the best level this host offers, at
// `bwrap` (what a host without usable cgroups gets) and at `process` (no bubblewrap either).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { IsolationLevel } from "../../../../controllers/drivers/driver.ts";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { describeDriverConformance } from "../conformance.ts";
import { startOutside } from "../../../support/outside-net.ts";

for (const level of [undefined, "bwrap", "process"] as (IsolationLevel | undefined)[]) {
  const dataDir = mkdtempSync(join(tmpdir(), `local-driver-${level ?? "best"}-`));
  const options = { dataDir, level, cgroupName: `kruise-test-${process.pid}-${level ?? "best"}` };
  describeDriverConformance(`local, ${level ? `forced ${level}` : "best level"}`, {
    make: () => new LocalDriver(options),
    restart: () => new LocalDriver(options),
    internet: async () => {
      const outside = await startOutside();
      return { url: `http://${outside.ip}/`, stop: () => outside.stop() };
    },
    dispose: (driver) => {
      (driver as LocalDriver).dispose();
      rmSync(dataDir, { recursive: true, force: true });
    },
  });
}
