// A worker thread of step-claim.test.ts's takeover races: in each round it waits at the barrier,
// then claims the round's step (whose claim a dead builder left, maybe with a dead taker's
// marker); the one that gets the claim counts itself, "builds" for a moment, publishes the layer
// and releases the claim. `jitter`: its file-system calls wait a random moment first.
import fs, { mkdirSync, existsSync } from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import { join } from "node:path";
import { workerData } from "node:worker_threads";

const { root, rounds, shared, jitter } = workerData as { root: string; rounds: number; shared: SharedArrayBuffer; jitter?: boolean };
if (jitter) {
  // Each file-system call the claim makes waits up to ~0.3 ms first, so the threads interleave
  // between any two of a waiter's steps (a read and the delete it decides on), not only where the
  // scheduler happens to switch.
  const pause = new Int32Array(new SharedArrayBuffer(4));
  for (const name of ["readFileSync", "readlinkSync", "rmSync", "symlinkSync", "renameSync", "linkSync"] as const) {
    const real = fs[name] as (...args: unknown[]) => unknown;
    (fs as unknown as Record<string, unknown>)[name] = (...args: unknown[]) => {
      Atomics.wait(pause, 0, 0, Math.random() * 0.3);
      return real(...args);
    };
  }
  syncBuiltinESMExports();
}
// Imported after the patch, so its named imports are the patched functions.
const { claimStep } = await import("../../../../../controllers/drivers/local/builder/step-claim.ts");
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
