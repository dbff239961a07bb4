// Disks formatted and mounted ahead of need, so a create takes one with a rename instead of
// waiting for mkfs and mount (tens of ms on this machine, more under load). A spare is a
// directory `<dataDir>/spare-disks/<sizeMB>-<random>/` holding `disk.img` mounted at `disk/`
// (a disk-stock.ts entry): exactly what a sandbox directory holds. Spares are made one at a time
// in the background after a size is asked for, through the spawner, and survive an agent restart
// like sandboxes do (the next driver takes over the ones still mounted). A destroyed sandbox's
// image joins the stock too, emptied and formatted anew by its destroy's helper (`recycle`), which
// spares the fork, files and inode of a new one and the unlink of the old one per cycle.
import { join } from "node:path";
import { imageMB, mountDisk } from "./disk.ts";
import { DiskStock } from "./disk-stock.ts";
import type { Spawner } from "./spawner.ts";

/** Sizes kept in stock at once (the most recently asked for). */
const MAX_SIZES = 3;
/** Spares per size that destroyed sandboxes' disks, reset (`recycle`), may bring the stock up to:
 * a burst of destroys feeds the next burst of creates without a format of their own. Each idle one
 * holds a loop device, a mount and its image's metadata (~1 MB of sparse file). */
const RECYCLED_MAX = 32;
/** An image holding more than this (what its tenant wrote) is unlinked in the background as before
 * rather than reset on destroy's path: its truncate would free every extent there. */
const RECYCLE_MOST_BYTES = 64 * 1024 * 1024;

export class SpareDisks extends DiskStock<number> {
  constructor(dataDir: string, spawner: Spawner, perSize: number) {
    super({
      dir: join(dataDir, "spare-disks"),
      spawner,
      perKey: perSize,
      maxKeys: MAX_SIZES,
      make: (sizeMB, image, at) => mountDisk(spawner, image, at, sizeMB),
      name: (sizeMB) => String(sizeMB),
      what: (sizeMB) => `a spare disk of ${sizeMB} MB`,
      adopt: (name) => (/^\d+$/.test(name) ? Number(name) : undefined),
      recycleMax: Math.max(perSize, RECYCLED_MAX),
    });
  }

  /** Where a destroyed sandbox's image of `sizeMB` goes to become a spare (its destroy's helper
   * resets it: remove-tree.ts), or undefined when the stock of that size needs none. */
  recycle(sizeMB: number): { dir: string; image: string; recycle: { bytes: number; most: number; at: string } } | undefined {
    const dir = this.offer(sizeMB);
    if (!dir) return undefined;
    return { dir, image: join(dir, "disk.img"), recycle: { bytes: imageMB(sizeMB) * 1024 * 1024, most: RECYCLE_MOST_BYTES, at: join(dir, "disk") } };
  }
}
