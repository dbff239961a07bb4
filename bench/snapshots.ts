// Snapshot figures of the local driver (snapshots.ts), called from bench/local.ts:
// - a create from a snapshot (its disk image copied, then mounted) against a plain create with
//   spare disks as the agent runs (taken from stock, or formatted when none is ready), interleaved
//   one by one so load drifts hit both alike; ratio target ≤ 1.5;
// - the time to snapshot a running sandbox that wrote 100 MB (sparse copy of its image under the
//   freeze), and one that wrote nothing;
// - whether the data directory's file system can reflink (the copy is then a clone).
//   node bench/snapshots.ts    prints the figures as JSON
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { DesiredSandbox } from "../controllers/drivers/driver.ts";
import { LocalDriver } from "../controllers/drivers/local/local-driver.ts";
import type { BenchContext, Figures } from "./run.ts";
import { percentile as pct, round } from "./stats.ts";

const ROUNDS = 10;
const USER = { name: "user", uid: 1000, gid: 1000, home: "/home/user", shell: "/bin/bash" };

let seq = 0;
function desired(over: Partial<DesiredSandbox> = {}): DesiredSandbox {
  const id = `bsnap${process.pid}x${seq++}`;
  return { id, generation: 1, template: "base", state: "Running", pauseStrategy: "Freeze", resources: { cpuCount: 1, memoryMB: 512, diskSizeMB: 1024 }, allowInternetAccess: false, ...over };
}

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t = performance.now();
  await fn();
  return performance.now() - t;
}

/** Whether `dir`'s file system clones files (`cp --reflink=always` succeeds). */
function canReflink(dir: string): boolean {
  const a = join(dir, "reflink-probe");
  writeFileSync(a, "x");
  const ok = spawnSync("cp", ["--reflink=always", a, `${a}.copy`]).status === 0;
  rmSync(a, { force: true });
  rmSync(`${a}.copy`, { force: true });
  return ok;
}

export async function run(ctx: Partial<BenchContext> = {}): Promise<Figures> {
  const dataDir = mkdtempSync(join(ctx.dir ?? tmpdir(), "bench-snap-"));
  const driver = new LocalDriver({ dataDir, cgroupName: `kruise-bench-${process.pid}-snap`, spareDisks: 2 });
  const sh = (id: string, script: string) => driver.exec(id, { cmd: "/bin/bash", args: ["-c", script], cwd: "/home/user", env: { PATH: "/usr/bin:/bin" }, user: USER }, { timeoutMs: 120_000 });
  try {
    const src = desired();
    await driver.ensure(src);
    await sh(src.id, "mkdir -p /home/user/app && seq 1 10000 > /home/user/app/data.txt");
    const empty: number[] = [];
    for (let i = 0; i < 3; i++) empty.push(await timed(() => driver.snapshotFs(src.id, `bsnapempty${i}`)));
    await sh(src.id, "head -c 100M /dev/urandom > /home/user/big.bin && sync");
    const changed: number[] = [];
    for (let i = 0; i < 3; i++) changed.push(await timed(() => driver.snapshotFs(src.id, `bsnap100m${i}`)));
    for (let i = 0; i < 3; i++) {
      await driver.deleteSnapshot({ id: `bsnap100m${i}` });
      if (i > 0) await driver.deleteSnapshot({ id: `bsnapempty${i}` });
    }

    const plain: number[] = [];
    const fromSnap: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const a = desired();
      plain.push(await timed(() => driver.ensure(a)));
      const b = desired({ restoreFrom: { id: "bsnapempty0" } });
      fromSnap.push(await timed(() => driver.ensure(b)));
      await driver.destroy(a.id);
      await driver.destroy(b.id);
    }
    await driver.deleteSnapshot({ id: "bsnapempty0" });
    await driver.destroy(src.id);
    const ratio = pct(fromSnap, 50) / pct(plain, 50);
    return {
      "local.create_from_snapshot_p50_ms": { value: round(pct(fromSnap, 50)), unit: "ms" },
      "local.plain_create_same_run_p50_ms": { value: round(pct(plain, 50)), unit: "ms" },
      "local.create_from_snapshot_vs_plain": { value: round(ratio, 2), unit: "x", target: "≤ 1.5" },
      "local.snapshot_ms_per_100mb_changed": { value: round(pct(changed, 50)), unit: "ms" },
      "local.snapshot_unchanged_ms": { value: round(pct(empty, 50)), unit: "ms" },
      "local.snapshot_reflink": { value: canReflink(dataDir) ? 1 : 0, unit: "bool" },
    };
  } finally {
    for (const s of await driver.list()) await driver.destroy(s.id);
    await driver.dispose();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

if (import.meta.main) console.log(JSON.stringify(await run(), null, 2));
