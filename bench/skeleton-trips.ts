// `node bench/skeleton-trips.ts [--rounds n] [--creates n]`: the feature skeleton's required work
// in two designs, served by one workerd, driven by the same 50 clients in alternating rounds
// (bench/skeleton/feature-worker.js):
//   four calls   today's chain: Worker → quota object → pool, then quota → group → cluster
//   one trip     Worker → the pool's object (warm members, claimed sandboxes, leased quota
//                credits) → cluster: the design of issue 16.2 (issue 16 notes, session 11)
//   +quota call  the same with no lease: the pool's object asks the quota object on every create
//                (one call and its commit on the answer path), which splits what one trip saves
//                into the quota's part and the pool/group merge's
//   group trip   Worker → the claim group that will own the sandbox (members leased to it by the
//                pool, credits by the quota object; the pool and the quota told off the answer
//                path from an outbox row) → cluster: the one-trip design that keeps the product's
//                ownership by id (notes s17-claim)
// Prints workerd CPU per create of each per round (the sides back to back, each first, middle and
// last in turn), the per-round ratio of one trip over four calls and the per-round differences,
// medians, spread, load.
// Not part of `npm run bench` (it writes no figures): it measures what the redesign would save
// before it is built.
import { mkdtempSync, rmSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { startSqld } from "../scripts/lib/sqld.ts";
import { startSkeleton } from "./skeleton.ts";
import { median } from "./stats.ts";

console.log(`load average ${loadavg().map((x) => x.toFixed(1)).join(" ")} (before)`);
const { values: opt } = parseArgs({ options: { rounds: { type: "string", default: "8" }, creates: { type: "string", default: "1500" } } });
const rounds = Number(opt.rounds);
const creates = Number(opt.creates);
const CLIENTS = 50;
type Side = "four" | "one" | "quota" | "group";

const tmp = mkdtempSync("/dev/shm/sbx-skeleton-trips-");
const sqld = await startSqld({ dir: join(tmp, "sqld") });
const skeleton = await startSkeleton(join(tmp, "skeleton"), sqld.url);
try {
  await skeleton.features(500, CLIENTS); // fill and warm-up
  await skeleton.oneTripRound(500, CLIENTS, true);
  await skeleton.groupTripRound(500, CLIENTS, true);
  const cpu: Record<Side, number[]> = { four: [], one: [], quota: [], group: [] };
  const sides: Side[] = ["four", "one", "quota", "group"];
  for (let r = 0; r < rounds; r++) {
    // Each side first, middle and last in turn (the machine's load drifts within a round).
    const order = sides.map((_, i) => sides[(i + r) % sides.length]!);
    for (const side of r % 2 ? order.reverse() : order) {
      const p =
        side === "four"
          ? await skeleton.featureRound(creates, CLIENTS)
          : side === "group"
            ? await skeleton.groupTripRound(creates, CLIENTS)
            : await skeleton.oneTripRound(creates, CLIENTS, false, side === "quota");
      cpu[side].push(p.cpuMs);
    }
    console.log(`round ${r}: workerd ms/create four calls ${cpu.four.at(-1)!.toFixed(3)}, one trip ${cpu.one.at(-1)!.toFixed(3)}, one trip + quota call ${cpu.quota.at(-1)!.toFixed(3)}, group trip ${cpu.group.at(-1)!.toFixed(3)} (load ${loadavg()[0]!.toFixed(1)})`);
  }
  const fmt = (xs: number[], d = 3) => `${xs.map((x) => x.toFixed(d)).join(" ")} (median ${median(xs).toFixed(d)}, spread ${Math.min(...xs).toFixed(d)}..${Math.max(...xs).toFixed(d)})`;
  const per = (f: (i: number) => number) => cpu.four.map((_, i) => f(i));
  console.log(`four calls ms/create            ${fmt(cpu.four)}`);
  console.log(`one trip ms/create              ${fmt(cpu.one)}`);
  console.log(`one trip + quota call ms/create ${fmt(cpu.quota)}`);
  console.log(`group trip ms/create            ${fmt(cpu.group)}`);
  console.log(`one trip / four calls, per round ${fmt(per((i) => cpu.one[i]! / cpu.four[i]!))}`);
  console.log(`group trip / four calls, per round ${fmt(per((i) => cpu.group[i]! / cpu.four[i]!))}`);
  console.log(`group trip / one trip, per round ${fmt(per((i) => cpu.group[i]! / cpu.one[i]!))}`);
  console.log(`the quota call and commit (+quota − one trip), ms per round ${fmt(per((i) => cpu.quota[i]! - cpu.one[i]!))}`);
  console.log(`the pool/group split (four − +quota), ms per round ${fmt(per((i) => cpu.four[i]! - cpu.quota[i]!))}`);
  console.log(`load average ${loadavg().map((x) => x.toFixed(1)).join(" ")}`);
} finally {
  await skeleton.stop();
  await sqld.stop();
  rmSync(tmp, { recursive: true, force: true });
}
