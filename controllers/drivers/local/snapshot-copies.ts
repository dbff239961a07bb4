// Copies of a snapshot's disk made ahead, so the next sandbox from it takes one with a rename
// instead of waiting for the copy and the mount (the bulk of a create from a snapshot: the copy is
// the bytes the sandbox wrote, the mount a loop device and an ext4 journal to read). A copy is a
// directory `<dataDir>/snapshot-copies/<snapshot>-<random>/` holding `disk.img` mounted at
// `disk/` (a disk-stock.ts entry, as spare disks are). One copy per snapshot used recently, made
// in the background after a create from it; dropped when the snapshot is deleted, when the
// driver stops, and at start (a copy is cheap to make again).
import { join } from "node:path";
import { DiskStock } from "./disk-stock.ts";
import type { Spawner } from "./spawner.ts";

/** Snapshots with a copy kept at once (the most recently used). */
const MAX_SNAPSHOTS = 4;

export class SnapshotCopies extends DiskStock<string> {
  /** `make`: a copy of snapshot `id` at `image`, mounted at `at`. */
  constructor(dataDir: string, spawner: Spawner, make: (id: string, image: string, at: string) => Promise<void>) {
    super({ dir: join(dataDir, "snapshot-copies"), spawner, perKey: 1, maxKeys: MAX_SNAPSHOTS, make, name: (id) => id, what: (id) => `a copy of snapshot ${id}` });
  }
}
