// Removal of the cgroups a test made to run something as a container runs (a pod's sidecar).
// A SIGKILL to the process the test spawned is not enough: what it started (the sidecar's shell,
// perl, node) may live on in the cgroup, and the kernel refuses to remove a cgroup holding a
// process (EBUSY), or until a killed one has exited. Left behind, one directory per run stayed in
// the host's cgroup tree, with whatever still ran in it.
import { rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { waitFor } from "./wait-for.ts";

/** Ends every process in each cgroup v2 directory of `dirs` and its descendants (`cgroup.kill`,
 * Linux 5.14+), then removes them, in the order given (innermost first). A directory that is not
 * there counts as removed. */
export async function removeCgroups(dirs: string[], timeoutMs = 10_000): Promise<void> {
  for (const dir of dirs) {
    try {
      writeFileSync(join(dir, "cgroup.kill"), "1");
    } catch {
      // not there (never made, or removed already)
    }
    await waitFor(() => {
      try {
        rmdirSync(dir);
        return true;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === "ENOENT") return true;
        throw err;
      }
    }, { timeoutMs, what: `${dir} removed` });
  }
}
