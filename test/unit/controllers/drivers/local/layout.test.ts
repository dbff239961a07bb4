// A sandbox's paths (layout.ts layoutFor), asked for several times per create, are built by
// appending names to its directory rather than by path.join each: the same paths join gives,
// whatever shape the data directory was given in.
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { layoutFor } from "../../../../../controllers/drivers/local/layout.ts";

/** The layout as join alone builds it. */
function joined(dataDir: string, id: string, onDisk: boolean, rooted: boolean) {
  const dir = join(dataDir, "sandboxes", id);
  const files = onDisk ? join(dir, "disk") : dir;
  const upper = join(files, "upper");
  return {
    merged: join(dir, "root"), volatile: join(dir, "volatile"), upper, work: join(files, "work"), rooted, dir,
    image: join(dir, "disk.img"), disk: join(dir, "disk"), onDisk, record: join(dir, "record.json"), etc: join(files, "etc"),
    etcBase: join(dataDir, "etc-base"), rootfs: join(dataDir, "rootfs"), layer: rooted ? upper : join(files, "layer"), log: join(files, "holder.log"),
  };
}

describe("layoutFor", () => {
  it("gives the paths path.join gives, for data directories in any shape", () => {
    const dirs = ["/var/lib/kruise", "/var/lib/kruise/", "/var//lib/./kruise", "/tmp/x/../y", "data", "./data/", "/", ".", "a/.."];
    for (const dataDir of dirs) {
      for (const id of ["sbx-1", "a", "..", "."]) {
        for (const onDisk of [false, true]) {
          for (const rooted of [false, true]) expect(layoutFor(dataDir, id, onDisk, rooted), `${dataDir} ${id} ${onDisk} ${rooted}`).toEqual(joined(dataDir, id, onDisk, rooted));
        }
      }
    }
  });

  it("follows a change of data directory (two drivers in one process)", () => {
    expect(layoutFor("/one", "s").record).toBe("/one/sandboxes/s/record.json");
    expect(layoutFor("/two/", "s").etcBase).toBe("/two/etc-base");
    expect(layoutFor("/one", "s").rootfs).toBe("/one/rootfs");
  });
});
