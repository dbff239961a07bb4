// A root filesystem of its own per sandbox (controllers/drivers/local/root-overlay.ts) against
// today's view of the host, in the same run, creates interleaved so load from elsewhere on the
// machine hits both alike; and what a new rooted sandbox's private disk holds (the template's
// layers are shared, so near nothing: the used space its file system reports, and the blocks the
// host gives its sparse image, ext4's metadata and journal included). Both drivers keep spare disks as the agent does, so the
// difference is the overlay (mount, identity files), not mkfs.
//   node bench/rootfs.ts     prints the figures as JSON (called from bench/local.ts's run)
import { mkdtempSync, rmSync, statSync, statfsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { DesiredSandbox } from "../controllers/drivers/driver.ts";
import { LocalDriver } from "../controllers/drivers/local/local-driver.ts";
import { layoutFor } from "../controllers/drivers/local/layout.ts";
import { RootfsStore } from "../controllers/drivers/local/rootfs/store.ts";
import type { BenchContext, Figures } from "./run.ts";
import { percentile as pct, round } from "./stats.ts";

const PAIRS = 15;

function desired(id: string): DesiredSandbox {
  return { id, generation: 1, template: "base", state: "Running", pauseStrategy: "Freeze", resources: { cpuCount: 1, memoryMB: 512, diskSizeMB: 1024 }, allowInternetAccess: false };
}

export async function rootfsFigures(ctx: Partial<BenchContext>): Promise<Figures> {
  if (!new RootfsStore().templateTrees("base")) {
    console.warn("bench rootfs: the base template is not built (node controllers/drivers/local/rootfs/cli.ts build-base); no rootfs figures");
    return {};
  }
  const dirs = [mkdtempSync(join(ctx.dir ?? tmpdir(), "bench-rootfs-")), mkdtempSync(join(ctx.dir ?? tmpdir(), "bench-hostview-"))];
  const rooted = new LocalDriver({ dataDir: dirs[0]!, cgroupName: `kruise-bench-${process.pid}-rootfs`, spareDisks: 2 });
  const hostView = new LocalDriver({ dataDir: dirs[1]!, cgroupName: `kruise-bench-${process.pid}-hostview`, spareDisks: 2, rootfs: false });
  const kinds = [["rootfs", rooted, dirs[0]!], ["host", hostView, dirs[1]!]] as const;
  const creates = { rootfs: [] as number[], host: [] as number[] };
  const usedKB: number[] = [];
  const imageKB: number[] = [];
  let seq = 0;
  try {
    for (let i = 0; i < PAIRS; i++) {
      for (const [kind, driver, dataDir] of kinds) {
        const d = desired(`broot${process.pid}x${seq++}`);
        const t = performance.now();
        await driver.ensure(d);
        creates[kind].push(performance.now() - t);
        if (kind === "rootfs") {
          const layout = layoutFor(dataDir, d.id, true, true);
          const s = statfsSync(layout.disk);
          usedKB.push(((s.blocks - s.bfree) * s.bsize) / 1024);
          // What the host gives the sparse image: the file system's own metadata and journal too.
          imageKB.push((statSync(layout.image).blocks * 512) / 1024);
        }
        await driver.destroy(d.id);
      }
    }
    return {
      "local.sandbox_private_disk_kb_at_start": { value: round(pct(usedKB, 50)), unit: "KB", target: "<= 1024" },
      "local.sandbox_disk_image_host_kb_at_start": { value: round(pct(imageKB, 50)), unit: "KB" },
      "local.create_rootfs_p50_ms": { value: round(pct(creates.rootfs, 50)), unit: "ms" },
      "local.create_host_view_p50_ms": { value: round(pct(creates.host, 50)), unit: "ms" },
      "local.rootfs_extra_create_ms": { value: round(pct(creates.rootfs, 50) - pct(creates.host, 50)), unit: "ms" },
    };
  } finally {
    for (const [, driver, dir] of kinds) {
      for (const s of await driver.list()) await driver.destroy(s.id).catch(() => {});
      await driver.dispose();
      rmSync(dir, { recursive: true, force: true });
    }
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) console.log(JSON.stringify(await rootfsFigures({}), null, 2));
