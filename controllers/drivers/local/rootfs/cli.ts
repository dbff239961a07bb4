// Template root filesystems from the command line (run as root):
//   node controllers/drivers/local/rootfs/cli.ts build-base        build or reuse `base`
//   node controllers/drivers/local/rootfs/cli.ts import <path> <name>  an OCI layout (dir or tar)
//                                                                   or a `docker save` tarball
//   node controllers/drivers/local/rootfs/cli.ts list              templates and their layers
//   node controllers/drivers/local/rootfs/cli.ts prune             delete layers no template names
// SBX_ROOTFS_DIR overrides where they live (default ~/.cache/sandbox-edge/rootfs).
import { ensureBaseRootfs } from "./build-base.ts";
import { importImage } from "./image-import.ts";
import { RootfsStore } from "./store.ts";

// Ctrl-C reaches mmdebstrap too (one process group): it stops, and the build's failure path removes
// the half-built layer before this process ends (exit 130); a second Ctrl-C ends it at once.
let interrupted = false;
process.on("SIGINT", () => {
  if (interrupted) process.exit(130);
  interrupted = true;
});

const [cmd, ...args] = process.argv.slice(2);
const store = new RootfsStore();
const log = (line: string) => console.log(`[rootfs] ${line}`);

try {
  if (cmd === "build-base") {
    const base = await ensureBaseRootfs(store, log);
    log(`${base.built ? "built" : "cached"}: base -> ${base.tree} (${(base.info.bytes / 1e6).toFixed(0)} MB, built in ${base.info.seconds} s)`);
  } else if (cmd === "import" && args.length === 2) {
    const t = await importImage(store, args[0]!, args[1]!, log);
    log(`imported ${t.name} -> ${store.layerTree(t.layers[0]!)}`);
  } else if (cmd === "list") {
    for (const t of store.templates()) {
      console.log(`${t.name}\t${t.layers.map((id) => store.layerTree(id)).join(":")}`);
    }
  } else if (cmd === "prune") {
    for (const id of await store.prune()) log(`removed ${id}`);
  } else {
    console.error("usage: cli.ts build-base | import <oci-layout-or-docker-save.tar> <name> | list | prune");
    process.exitCode = 2;
  }
} catch (err) {
  console.error(`[rootfs] ${interrupted ? "interrupted" : (err as Error).message}`);
  process.exitCode = interrupted ? 130 : 1;
}
