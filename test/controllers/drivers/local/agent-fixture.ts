// A stand-in agent for the restart tests: creates sandboxes concurrently and prints
// `created <id>` as each one is reported running, the way the agent tells its clients.
// Usage: node agent-fixture.ts <dataDir> <cgroupName> <prefix> <count>
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";

const [dataDir, cgroupName, prefix, count] = process.argv.slice(2);
const driver = new LocalDriver({ dataDir: dataDir!, cgroupName });
await Promise.all(
  Array.from({ length: Number(count) }, async (_, i) => {
    const id = `${prefix}${i}`;
    await driver.ensure({ id, generation: 1, template: "base", state: "Running", pauseStrategy: "Freeze", resources: { cpuCount: 1, memoryMB: 128 }, allowInternetAccess: false });
    process.stdout.write(`created ${id}\n`);
  }),
);
process.stdout.write("done\n");
