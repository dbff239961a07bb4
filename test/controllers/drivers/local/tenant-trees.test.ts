// Trees a tenant shaped and the agent deletes as the host's root (remove-tree.ts): a retired
// template's layers, a failed build step's staging directory, a sandbox's directory without a disk.
// Each is 3000 directories deep, past PATH_MAX (Node's rmSync overflowed its stack at ~1800 levels
// and fs.promises.rm failed with ENAMETOOLONG, leaving the tree on the host's disk for good), and
// holds a link to a host directory, which must be left as it was. Needs root (mounts; the global
// setup built `base`).
import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { runDirectBuild } from "../../../../controllers/drivers/local/builder/direct-build.ts";
import { RetiredTemplates } from "../../../../controllers/drivers/local/builder/retire.ts";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { RootfsStore } from "../../../../controllers/drivers/local/rootfs/store.ts";
import { TemplateStep } from "../../../../schema/api/template-build.ts";
import type { BuildLog } from "../../../../schema/protocol/build.ts";
import { removeBuiltLayers } from "../../../support/built-layers.ts";
import { desiredSandbox, destroyAll, pollUntil, shIn, USER } from "./fixture.ts";

const tag = randomUUID().slice(0, 8);
const scratch = mkdtempSync(join(tmpdir(), "sbx-tenant-trees-"));
/** A host directory the trees link to: it and its file must survive every removal. */
const victim = join(scratch, "host-dir");
mkdirSync(victim);
writeFileSync(join(victim, "keep"), "the host's own\n");

const DEPTH = 3000;
/** Python that makes `$1/a/a/…` DEPTH deep (relative steps: the whole path is past PATH_MAX) with
 * a link to the host directory at the bottom and one halfway. */
const DEEP = `import os, sys
os.makedirs(sys.argv[1], exist_ok=True); os.chdir(sys.argv[1])
for i in range(${DEPTH}):
    os.mkdir("a"); os.chdir("a")
    if i == ${DEPTH / 2}: os.symlink(sys.argv[2], "host")
os.symlink(sys.argv[2], "host"); open("f", "w").write("x")`;

const store = new RootfsStore();
const since = Date.now();
const outputs: string[] = [];
const noDiskDir = mkdtempSync(join(tmpdir(), "sbx-tenant-trees-nodisk-"));
const noDisk = new LocalDriver({ dataDir: noDiskDir, cgroupName: `kruise-test-${process.pid}-trees`, disk: false });

afterAll(async () => {
  await destroyAll(noDisk, noDiskDir);
  await removeBuiltLayers(store, outputs, since);
  execFileSync("rm", ["-rf", "--one-file-system", "--", scratch]);
});

function victimIntact(): void {
  expect(readFileSync(join(victim, "keep"), "utf8")).toBe("the host's own\n");
}

describe("deleting a tree a tenant shaped, 3000 deep with a link to a host directory", () => {
  it("a retired template's layers go; one that cannot go whole (a mount inside) does not stop the sweep, and goes at a later one", async () => {
    const root = join(scratch, "store");
    const s = new RootfsStore(root);
    for (const id of ["step-deep", "step-mounted", "step-after"]) {
      const staging = s.stagingDir(id);
      mkdirSync(join(staging, "rootfs"));
      await s.commitLayer(staging, { id, kind: "build", source: { step: "RUN", key: id } }, Date.now(), "");
      // Deepened once published (a layer's measurement walks it by path).
      execFileSync("python3", ["-c", DEEP, join(s.layerTree(id), "deep"), victim]);
    }
    s.putTemplate("b-deep", ["step-deep", "step-mounted", "step-after"]);
    const mnt = join(s.layerTree("step-mounted"), "mnt");
    mkdirSync(mnt);
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt]);
    writeFileSync(join(mnt, "inside"), "x");
    const logged: string[] = [];
    const retired = new RetiredTemplates(s, async () => new Set(), () => [], (m) => logged.push(m));
    // Taken out of the store first (renamed), the mount with it.
    const moved = () => readdirSync(join(root, "layers")).filter((n) => n.startsWith(".remove-step-mounted-")).map((n) => join(root, "layers", n, "rootfs", "mnt"));
    try {
      expect(await retired.retire(["b-deep"])).toEqual(["step-deep", "step-after"]);
      expect(logged).toEqual([expect.stringMatching(/^retired layer step-mounted: rm: .*skipping .*mnt.*different device/s)]);
      // Never through the mount.
      expect(moved().map((m) => readFileSync(join(m, "inside"), "utf8"))).toEqual(["x"]);
    } finally {
      for (const m of [mnt, ...moved()]) if (existsSync(join(m, "inside"))) execFileSync("umount", [m]);
    }
    expect(await retired.sweep()).toEqual(["step-mounted"]);
    expect(readdirSync(join(root, "layers"))).toEqual([]);
    retired.dispose();
    victimIntact();
  }, 120_000);

  it("a build step's staging directory goes when its layer cannot be copied off (a path past PATH_MAX)", async () => {
    const output = `trees-${tag}`;
    outputs.push(output);
    const logs: BuildLog[] = [];
    const step = TemplateStep.parse({ type: "RUN", args: [`python3 -c '${DEEP}' /deep ${victim}`, "root"] });
    const r = await runDirectBuild({ from: "base", owner: `test-trees-${tag}`, output, diskMB: 256, steps: [step] }, (l) => logs.push(l), store);
    expect(r, logs.map((l) => l.message).join("\n")).toMatchObject({ status: "error", message: expect.stringContaining("the step's files could not be copied into its layer (a path in it is too long)") });
    expect(readdirSync(join(store.root, "layers")).filter((n) => n.startsWith(".build-"))).toEqual([]);
    victimIntact();
  }, 180_000);

  it("a sandbox without a disk: its writable layer goes with it at destroy", async () => {
    const d = desiredSandbox("tt");
    await noDisk.ensure(d);
    const made = await shIn(noDisk, d.id, `python3 -c '${DEEP}' /home/user/deep ${victim} && echo made`, USER);
    expect(made.stdout.trim(), made.stderr).toBe("made");
    await noDisk.destroy(d.id);
    const left = () => [...readdirSync(join(noDiskDir, "sandboxes")).filter((n) => n.startsWith(d.id)), ...readdirSync(join(noDiskDir, "trash"))];
    expect(await pollUntil(left, (l) => l.length === 0, 30_000)).toEqual([]);
    victimIntact();
  }, 120_000);
});
