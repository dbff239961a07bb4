// `node bench/skeleton-trips.ts [--rounds n] [--creates n]`: the feature skeleton's required work
// in two designs, served by one workerd, driven by the same 50 clients in alternating rounds
// (bench/skeleton/feature-worker.js):
//   four calls   today's chain: Worker → quota object → pool, then quota → group → cluster
//   one trip     Worker → the pool's object (warm members, claimed sandboxes, leased quota
//                credits) → cluster: the design of issue 16.2 (issue 16 notes, session 11)
// Prints workerd CPU per create of each per round, the per-round ratio (one trip over four calls,
// the two run back to back, the order swapped every round), medians, spread, load.
// Not part of `npm run bench` (it writes no figures): it measures what the redesign would save
// before it is built.
import { mkdtempSync, rmSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { startSqld } from "../scripts/lib/sqld.ts";
import { startSkeleton } from "./skeleton.ts";
import { median } from "./stats.ts";

const { values: opt } = parseArgs({ options: { rounds: { type: "string", default: "8" }, creates: { type: "string", default: "1500" } } });
const rounds = Number(opt.rounds);
const creates = Number(opt.creates);
const CLIENTS = 50;

const tmp = mkdtempSync("/dev/shm/sbx-skeleton-trips-");
const sqld = await startSqld({ dir: join(tmp, "sqld") });
const skeleton = await startSkeleton(join(tmp, "skeleton"), sqld.url);
try {
  await skeleton.features(500, CLIENTS); // fill and warm-up
  await skeleton.oneTripRound(500, CLIENTS, true);
  const four: number[] = [];
  const one: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 ? ["one", "four"] : ["four", "one"];
    for (const side of order) {
      const p = side === "four" ? await skeleton.featureRound(creates, CLIENTS) : await skeleton.oneTripRound(creates, CLIENTS);
      (side === "four" ? four : one).push(p.cpuMs);
    }
    console.log(`round ${r}: workerd ms/create four calls ${four.at(-1)!.toFixed(3)}, one trip ${one.at(-1)!.toFixed(3)} (load ${loadavg()[0]!.toFixed(1)})`);
  }
  const ratios = one.map((x, i) => x / four[i]!);
  const fmt = (xs: number[], d = 3) => `${xs.map((x) => x.toFixed(d)).join(" ")} (median ${median(xs).toFixed(d)}, spread ${Math.min(...xs).toFixed(d)}..${Math.max(...xs).toFixed(d)})`;
  console.log(`four calls ms/create ${fmt(four)}`);
  console.log(`one trip   ms/create ${fmt(one)}`);
  console.log(`one trip / four calls, per round ${fmt(ratios)}`);
  console.log(`load average ${loadavg().map((x) => x.toFixed(1)).join(" ")}`);
} finally {
  await skeleton.stop();
  await sqld.stop();
  rmSync(tmp, { recursive: true, force: true });
}
