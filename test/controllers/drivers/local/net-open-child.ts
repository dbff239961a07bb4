// One driver's network setup in a child process, for tests that need several drivers acting at
// the same instant (sandbox-net.test.ts runs these in a network and mount namespace of their own).
// Usage: node net-open-child.ts <at, ms since epoch> <bridge> <subnet> [<leases to take>]
// Without leases to take, the setup starts at <at>; with them, the leasing does. Prints one JSON
// line: {error} when the setup failed, else {leases: [the addresses it got]}.
import { SandboxNet } from "../../../../controllers/drivers/local/sandbox-net.ts";

const [at, bridge, subnet, wanted] = process.argv.slice(2);
const waitUntil = (ms: number) => {
  while (Date.now() < ms);
};
if (!wanted) waitUntil(Number(at));
const net = SandboxNet.open({ bridge, subnet });
if (typeof net === "string") {
  console.log(JSON.stringify({ error: net }));
} else {
  waitUntil(Number(at));
  const leases: string[] = [];
  try {
    for (let i = 0; i < Number(wanted ?? 0); i++) leases.push(net.lease(`/nonexistent/${process.pid}/${i}/record.json`));
  } catch (err) {
    if (!/no free sandbox address/.test((err as Error).message)) throw err;
  }
  console.log(JSON.stringify({ leases }));
}
