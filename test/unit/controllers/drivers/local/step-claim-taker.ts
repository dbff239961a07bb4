// A worker thread of step-claim.test.ts's takeover race: in each round it waits at the barrier,
// then claims the round's step (whose claim a dead builder left); the one that gets the claim
// counts itself, "builds" for a moment, publishes the layer and releases the claim.
import { mkdirSync, existsSync } from "node:fs";
import { join } from "node:path";
import { workerData } from "node:worker_threads";
import { claimStep } from "../../../../../controllers/drivers/local/builder/step-claim.ts";

const { root, rounds, shared } = workerData as { root: string; rounds: number; shared: SharedArrayBuffer };
// [0]: the round released (1-based), [1]: workers done with it, [2 + r]: claims won in round r.
const state = new Int32Array(shared);
for (let r = 0; r < rounds; r++) {
  Atomics.wait(state, 0, r);
  const dir = join(root, `round-${r}`);
  const got = await claimStep(dir, "step", { hasLayer: () => existsSync(join(dir, "layer")), onWait: () => undefined, pollMs: 2 });
  if (got !== "cached") {
    Atomics.add(state, 2 + r, 1);
    await new Promise((ok) => setTimeout(ok, 5));
    mkdirSync(join(dir, "layer"), { recursive: true });
    got();
  }
  Atomics.add(state, 1, 1);
  Atomics.notify(state, 1);
}
