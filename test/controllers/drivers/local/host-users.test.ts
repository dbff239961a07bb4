// Local host users (not tenants) against the local driver's files (README.md "User namespace"):
// the data directory lets every uid pass, since holders start as their ranges' uids, but a
// sandbox's own directory (its root overlay, upper and ID-mapped layers) and a running build
// step's root under /run/kruise-builds let only that range pass. Those overlays keep set-uid
// files owned by the range's root uid, the owner of the sandbox's user namespace: a host user who
// executed one would get that uid. A uid outside every range (65000) reaches nothing there;
// sandboxes still start, pause, resume, snapshot and run commands. Needs root.
import { spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { chmodSync, existsSync, mkdtempSync, readdirSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { runDirectBuild } from "../../../../controllers/drivers/local/builder/direct-build.ts";
import { STEP_ROOTS } from "../../../../controllers/drivers/local/builder/sandbox.ts";
import { layoutFor } from "../../../../controllers/drivers/local/layout.ts";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { readRecord } from "../../../../controllers/drivers/local/records.ts";
import { RootfsStore } from "../../../../controllers/drivers/local/rootfs/store.ts";
import type { SandboxUser } from "../../../../controllers/runtime/sandbox-view.ts";
import { TemplateStep } from "../../../../schema/api/template-build.ts";
import { removeBuiltLayers } from "../../../support/built-layers.ts";
import { desiredSandbox, destroyAll, shIn } from "./fixture.ts";

const ROOT: SandboxUser = { name: "root", uid: 0, gid: 0, home: "/root", shell: "/bin/bash" };
const STRANGER = 65000;
const dataDir = mkdtempSync(join(tmpdir(), "sbx-host-users-"));
const cgroupName = `kruise-test-${process.pid}-hostusers`;
let driver = new LocalDriver({ dataDir, cgroupName });
const store = new RootfsStore();
const since = Date.now();
const outputs: string[] = [];
afterAll(async () => {
  await destroyAll(driver, dataDir);
  removeBuiltLayers(store, outputs, since);
});

/** `argv` run on the host as uid and gid 65000 with no supplementary groups: exit code and stderr. */
function asStranger(argv: string[]): { code: number | null; stderr: string } {
  const r = spawnSync("/usr/bin/setpriv", [`--reuid=${STRANGER}`, `--regid=${STRANGER}`, "--clear-groups", "--", ...argv], { encoding: "utf8", timeout: 10_000 });
  return { code: r.status, stderr: r.stderr };
}

/** Every path is out of the stranger's reach: stat, open and exec each fail with EACCES. */
function expectUnreachable(paths: string[], setuidFile: string): void {
  for (const p of paths) {
    expect(existsSync(p), p).toBe(true);
    const st = asStranger(["/usr/bin/stat", "--", p]);
    expect(st.code, p).not.toBe(0);
    expect(st.stderr, p).toMatch(/Permission denied/);
  }
  for (const p of paths.filter((x) => !statSync(x).isDirectory())) expect(asStranger(["/usr/bin/head", "-c1", "--", p]).code, p).not.toBe(0);
  // Through a shell: setpriv itself execs with its capabilities still held (it drops them at exec).
  const ran = asStranger(["/bin/sh", "-c", 'exec "$0" -p -c "id -u"', setuidFile]);
  expect(ran.code, setuidFile).not.toBe(0);
  expect(ran.stderr).toMatch(/Permission denied/);
}

describe("local host users and the driver's files", () => {
  it("a uid outside every range cannot stat, open or exec anything of a running sandbox's root, upper or layers, before and after a Stop pause, an agent restart (an older agent's open directory included) and in a sandbox made from its snapshot", async () => {
    const d = desiredSandbox("hu");
    await driver.ensure(d);
    const dir = join(dataDir, "sandboxes", d.id);
    const rec = readRecord(join(dir, "record.json"))!;
    expect(rec.root).toBeDefined(); // the tier's setup built base: the sandbox has a root overlay
    // A set-uid shell owned by the sandbox's root (on the host: its range's first uid).
    const made = await shIn(driver, d.id, "cp /bin/bash /usr/local/bin/rootsh && chmod 4755 /usr/local/bin/rootsh && stat -c %a:%U /usr/local/bin/rootsh", ROOT);
    expect(made.stdout).toBe("4755:root\n");
    /** The sandbox's files an outsider would aim at: its root (merged), upper, a layer, its record. */
    const paths = (id: string) => {
      const l = layoutFor(dataDir, id, readRecord(join(dataDir, "sandboxes", id, "record.json"))!.disk !== undefined, true);
      return [l.merged, join(l.merged, "etc", "passwd"), join(l.merged, "usr", "local", "bin", "rootsh"), l.upper, join(l.upper, "usr", "local", "bin", "rootsh"), join(l.dir, "layers", "0"), l.record];
    };
    expect(statSync(join(dir, "root", "usr", "local", "bin", "rootsh")).uid).toBe(rec.userns!.base);
    expectUnreachable(paths(d.id), join(dir, "root", "usr", "local", "bin", "rootsh"));
    expect(statSync(dir)).toMatchObject({ uid: 0, gid: rec.userns!.base, mode: 0o40710 });

    // Freeze and thaw, Stop and start: the holder (the range's uid) still reaches its root.
    await driver.ensure({ ...d, generation: 2, state: "Paused", pauseStrategy: "Freeze" });
    await driver.ensure({ ...d, generation: 3, state: "Running" });
    await driver.ensure({ ...d, generation: 4, state: "Paused", pauseStrategy: "Stop" });
    await driver.ensure({ ...d, generation: 5, state: "Running" });
    expect((await shIn(driver, d.id, "id -u; cat /etc/hostname; echo w > /home/user/w && cat /home/user/w")).stdout).toBe(`1000\n${d.id}\nw\n`);
    expect((await shIn(driver, d.id, "/usr/local/bin/rootsh -p -c 'id -u'")).stdout).toBe("0\n");
    expectUnreachable(paths(d.id), join(dir, "root", "usr", "local", "bin", "rootsh"));

    // An older agent left the directory open: the next driver closes it when it first reads it.
    chmodSync(dir, 0o755);
    await driver.dispose();
    driver = new LocalDriver({ dataDir, cgroupName });
    expect((await driver.list()).map((s) => s.id)).toContain(d.id);
    expectUnreachable(paths(d.id), join(dir, "root", "usr", "local", "bin", "rootsh"));
    expect((await shIn(driver, d.id, "cat /home/user/w")).stdout).toBe("w\n");

    // A sandbox made from its snapshot: the same guard, under its own range.
    const snap = await driver.snapshotFs(d.id, `snap${process.pid}hu`);
    const e = desiredSandbox("hu", { restoreFrom: { id: snap.id } });
    await driver.ensure(e);
    const copy = join(dataDir, "sandboxes", e.id);
    expect((await shIn(driver, e.id, "cat /home/user/w; stat -c %a /usr/local/bin/rootsh")).stdout).toBe("w\n4755\n");
    expectUnreachable(paths(e.id), join(copy, "root", "usr", "local", "bin", "rootsh"));
    expect(statSync(copy).gid).toBe(readRecord(join(copy, "record.json"))!.userns!.base);
    await driver.deleteSnapshot(snap);
  });

  it("a uid outside every range cannot stat, open or exec anything of a build step's root while the step runs", async () => {
    const tag = randomUUID().slice(0, 8);
    const before = new Set(existsSync(STEP_ROOTS) ? readdirSync(STEP_ROOTS) : []);
    const step = TemplateStep.parse({ type: "RUN", args: [`cp /bin/bash /usr/local/bin/stepsh && chmod 4755 /usr/local/bin/stepsh && echo started-${tag} && sleep 8`, "root"] });
    let started!: () => void;
    const running = new Promise<void>((ok) => (started = ok));
    outputs.push(`host-users-${tag}`);
    const build = runDirectBuild({ from: "base", owner: `test-${tag}`, output: `host-users-${tag}`, steps: [step] }, (l) => l.message === `started-${tag}` && started());
    try {
      await Promise.race([running, build.then((r) => Promise.reject(new Error(`the build ended first: ${r.status}`)))]);
      // The step's root, wherever this driver mounts it under STEP_ROOTS (the directory named as
      // the step's staging directory, or a mount point inside it).
      const names = readdirSync(STEP_ROOTS).filter((n) => !before.has(n));
      const roots = names.flatMap((n) => [join(STEP_ROOTS, n, "root"), join(STEP_ROOTS, n)]).filter((r) => existsSync(join(r, "usr", "local", "bin", "stepsh")));
      expect(roots).toHaveLength(1);
      const root = roots[0]!;
      expectUnreachable([root, join(root, "etc", "passwd"), join(root, "usr", "local", "bin", "stepsh")], join(root, "usr", "local", "bin", "stepsh"));
    } finally {
      // A failed check must not leave the step running past the file (its mounts would stay).
      await build.catch(() => undefined);
    }
    expect((await build).status).toBe("ready");
  }, 120_000);
});
