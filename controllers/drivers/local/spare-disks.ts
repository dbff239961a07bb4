// Disks formatted and mounted ahead of need, so a create takes one with a rename instead of
// waiting for mkfs and mount (tens of ms on this machine, more under load). A spare is a
// directory `<dataDir>/spare-disks/<sizeMB>-<random>/` holding `disk.img` mounted at `disk/`
// (a disk-stock.ts entry): exactly what a sandbox directory holds. Spares are made one at a time
// in the background after a size is asked for, through the spawner, and survive an agent restart
// like sandboxes do (the next driver takes over the ones still mounted).
import { join } from "node:path";
import { mountDisk } from "./disk.ts";
import { DiskStock } from "./disk-stock.ts";
import type { Spawner } from "./spawner.ts";

/** Sizes kept in stock at once (the most recently asked for). */
const MAX_SIZES = 3;

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
    });
  }
}
