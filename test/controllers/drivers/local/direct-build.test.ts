// A template build without an edge (builder/direct-build.ts), as `.ci/run` and `npm start` build
// the code-interpreter template: steps from `base` run in build sandboxes with a step network
// (here it reaches only the package mirror stand-in in a namespace of this machine), land as
// layers, and the same build again is served from the cache. Needs root (the global setup built
// `base`).
import { randomUUID } from "node:crypto";
import { execFileSync } from "node:child_process";
import { existsSync, lstatSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statfsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runDirectBuild, type DirectBuild } from "../../../../controllers/drivers/local/builder/direct-build.ts";
import { RootfsStore } from "../../../../controllers/drivers/local/rootfs/store.ts";
import { layerIdOf, planSteps } from "../../../../controllers/drivers/local/builder/plan.ts";
import { TemplateStep } from "../../../../schema/api/template-build.ts";
import type { BuildLog } from "../../../../schema/protocol/build.ts";
import { removeBuiltLayers } from "../../../support/built-layers.ts";
import { HOST_LOADER_SAW_IT, hostileEnv, parseEnv0 } from "../../../support/hostile-env.ts";
import { startPackageMirror, type PackageMirror } from "../../../support/package-mirror.ts";

const store = new RootfsStore();
const since = Date.now();
const tag = randomUUID().slice(0, 8);
const outputs: string[] = [];
let mirror: PackageMirror;

beforeAll(async () => {
  mirror = await startPackageMirror();
  mirror.addDeb({ name: `direct-${tag}`, version: "1.0", script: "echo direct" });
});

afterAll(async () => {
  mirror?.stop();
  await removeBuiltLayers(store, outputs, since);
});

const run = (command: string, user = "") => TemplateStep.parse({ type: "RUN", args: [command, user] });

/** A file of the built template, read from its top-most layer that has it. */
function builtFile(template: string, path: string): string | undefined {
  for (const id of [...(store.template(template)?.layers ?? [])].reverse()) {
    try {
      return readFileSync(join(store.layerTree(id), path), "utf8");
    } catch {
      // not in this layer
    }
  }
  return undefined;
}

async function build(b: DirectBuild): Promise<{ result: Awaited<ReturnType<typeof runDirectBuild>>; logs: BuildLog[] }> {
  const logs: BuildLog[] = [];
  outputs.push(b.output);
  const result = await runDirectBuild(b, (l) => logs.push(l), store);
  return { result, logs };
}

describe("a template build without an edge", () => {
  it("runs steps from base with a network and /tmp for every user; the same build again is all cached", async () => {
    const b: DirectBuild = {
      from: "base",
      owner: `test-${tag}`,
      output: `direct-${tag}`,
      steps: [
        // Only the mirror: base's own sources (a public archive) are moved out of apt's way.
        run(`rm -f /etc/apt/sources.list; rm -rf /etc/apt/sources.list.d/*; echo "${mirror.aptSource}" > /etc/apt/sources.list.d/mirror.list && apt-get update -q && apt-get install -y -q direct-${tag}`, "root"),
        run("t=$(mktemp /tmp/step.XXXXXX) && echo \"$(id -un) wrote /tmp\" > /home/user/tmp-check && direct-" + tag + " >> /home/user/tmp-check"),
      ],
    };
    const first = await build(b);
    expect(first.result.status, first.logs.map((l) => l.message).join("\n")).toBe("ready");
    expect(first.logs.map((l) => l.message).join("\n")).toContain(`Setting up direct-${tag} (1.0)`);
    expect(builtFile(b.output, "home/user/tmp-check")).toBe("user wrote /tmp\ndirect\n");
    // Each layer a step made names its team (whose cache bound counts it: retire.ts trim).
    const made = first.result.layers.slice(store.template("base")!.layers.length);
    expect(made.map((l) => store.layer(l)?.team)).toEqual([b.owner, b.owner]);

    const again = await build(b);
    expect(again.result.status).toBe("ready");
    expect(again.logs.filter((l) => l.message.startsWith("CACHED ")).length).toBe(2);
    expect(again.result.layers).toEqual(first.result.layers);
  }, 180_000);

  it("a step writes onto a disk of the build's bound: past it the step fails with ENOSPC, saying so, and the host keeps its space", async () => {
    const owner = `test-disk-${tag}`;
    const free = () => statfsSync(store.root).bavail * statfsSync(store.root).bsize;
    const before = free();
    const { result, logs } = await build({ from: "base", owner, output: `direct-disk-${tag}`, diskMB: 64, steps: [run("head -c 200M /dev/zero > /big", "root")] });
    expect(result).toMatchObject({ status: "error", message: expect.stringMatching(/^step 1 \(RUN\) failed: exit code 1; it filled its disk \(64 MiB: what was left of the build's 64 MiB for all its layers, or of the host's free space\)$/) });
    expect(logs.map((l) => l.message).join("\n")).toMatch(/No space left on device/);
    expect(store.template(`direct-disk-${tag}`)).toBeUndefined();
    // Nothing of it stays on the host: no staging directory, no image, no mount.
    expect(readdirSync(join(store.root, "layers")).filter((n) => n.startsWith(".build-"))).toEqual([]);
    expect(readFileSync("/proc/self/mountinfo", "utf8")).not.toContain(join(store.root, "layers", ".build-"));
    expect(before - free()).toBeLessThan(32 << 20);

    // The bound is the build's, not each step's: 40 MiB, then 40 more, do not fit in 64.
    const two = await build({ from: "base", owner, output: `direct-disk2-${tag}`, diskMB: 64, steps: [run("head -c 40M /dev/urandom > /a", "root"), run("head -c 40M /dev/urandom > /b", "root")] });
    expect(two.result).toMatchObject({ status: "error", message: expect.stringMatching(/^step 2 \(RUN\) failed: .*it filled its disk \((2[0-4]) MiB: what was left of the build's 64 MiB/) });
  }, 120_000);

  it("a build is bounded in files too (empty ones cost no bytes): a step that makes more than the bound fails the build naming it, and leaves no layer or staging", async () => {
    const owner = `test-files-${tag}`;
    const steps = [run("mkdir /many && cd /many && seq 1 5000 | xargs touch", "root")];
    const { result, logs } = await build({ from: "base", owner, output: `direct-files-${tag}`, diskMB: 256, files: 2000, steps });
    expect(result).toMatchObject({ status: "error", message: expect.stringMatching(/^step 1 \(RUN\) failed: exit code \d+; it used up the files its disk may hold \(2000: what was left of the build's 2000 files for all its layers, or of the host's free inodes, within one per 16 KiB of the disk\)$/) });
    expect(logs.map((l) => l.message).join("\n")).toMatch(/No space left on device/);
    expect(store.template(`direct-files-${tag}`)).toBeUndefined();
    const layer = layerIdOf(planSteps({ teamId: owner, buildId: "", baseLayers: store.template("base")!.layers, steps, force: false }).steps[0]!.key);
    expect(store.layer(layer)).toBeUndefined();
    expect(readdirSync(join(store.root, "layers")).filter((n) => n.startsWith(".build-"))).toEqual([]);

    // Within the disk's rounded-up count but past the bound: counted before it is published.
    const near = [run("mkdir /some && cd /some && seq 1 1990 | xargs touch", "root")];
    const second = await build({ from: "base", owner, output: `direct-files2-${tag}`, diskMB: 256, files: 1990, steps: near });
    expect(second.result).toMatchObject({ status: "error", message: expect.stringMatching(/^step 1 \(RUN\): its layer holds \d+ files, more than the 1990 left of the build's bound of 1990 files for all its layers$/) });
    expect(store.layer(layerIdOf(planSteps({ teamId: owner, buildId: "", baseLayers: store.template("base")!.layers, steps: near, force: false }).steps[0]!.key))).toBeUndefined();
  }, 120_000);

  it("a step's environment (LD_PRELOAD, PERL5OPT, BASH_ENV, NODE_OPTIONS…) reaches the step, never the host helpers that make, mount and copy its disk", async () => {
    const hostile = hostileEnv();
    try {
      const env = TemplateStep.parse({ type: "ENV", args: Object.entries(hostile.env).flat() });
      const output = `direct-hostile-${tag}`;
      const { result, logs } = await build({ from: "base", owner: `test-hostile-${tag}`, output, diskMB: 256, steps: [env, run("env -0 > /env-step", "root")] });
      expect(result.status, logs.map((l) => l.message).join("\n")).toBe("ready");
      expect(hostile.ran()).toEqual([]);
      expect(logs.map((l) => l.message).join("\n")).not.toContain(HOST_LOADER_SAW_IT);
      expect(parseEnv0(builtFile(output, "env-step") ?? "")).toMatchObject(hostile.env);
    } finally {
      hostile.dispose();
    }
  }, 120_000);

  it("a layer made on the step's disk keeps what the step left: owners, modes, links, deletions of the base's files", async () => {
    const output = `direct-copy-${tag}`;
    const { result, logs } = await build({
      from: "base",
      owner: `test-copy-${tag}`,
      output,
      diskMB: 256,
      steps: [
        run("mkdir -p /opt/c && echo one > /opt/c/f && chmod 640 /opt/c/f && chown user: /opt/c/f && ln -s f /opt/c/link && ln /opt/c/f /opt/c/hard && rm /etc/motd && rm -rf /usr/share/doc && mkdir /usr/share/doc && touch /usr/share/doc/only", "root"),
      ],
    });
    expect(result.status, logs.map((l) => l.message).join("\n")).toBe("ready");
    const top = store.layerTree(store.template(output)!.layers.at(-1)!);
    const f = lstatSync(join(top, "opt/c/f"));
    expect([f.mode & 0o777, f.uid, f.nlink]).toEqual([0o640, 1000, 2]);
    expect(readlinkSync(join(top, "opt/c/link"))).toBe("f");
    // Deleted: an overlay whiteout (a 0/0 character device); replaced: an opaque directory.
    const wh = lstatSync(join(top, "etc/motd"));
    expect([wh.isCharacterDevice(), wh.rdev]).toEqual([true, 0]);
    // What a sandbox of the template sees: the template's layers as one overlay.
    const at = mkdtempSync(join(tmpdir(), "sbx-direct-copy-"));
    const lowers = [...store.templateTrees(output)!].reverse().join(":");
    execFileSync("mount", ["-t", "overlay", "overlay", "-o", `ro,lowerdir=${lowers}`, at]);
    try {
      expect(existsSync(join(at, "etc/motd"))).toBe(false);
      expect(existsSync(join(at, "etc/passwd"))).toBe(true);
      expect(readdirSync(join(at, "usr/share/doc"))).toEqual(["only"]);
      expect(readFileSync(join(at, "opt/c/link"), "utf8")).toBe("one\n");
    } finally {
      execFileSync("umount", [at]);
      rmSync(at, { recursive: true, force: true });
    }
  }, 120_000);

  it("a step's root is root of a user namespace of its own (an unprivileged host uid, no device nodes), and its layer still says root, _apt, set-uid and file capabilities", async () => {
    const output = `direct-userns-${tag}`;
    const marker = `buildns-${tag}`;
    // The step's processes as the host sees them, while it runs (it waits for the test to look).
    const uids = new Set<number>();
    const seen = setInterval(() => {
      for (const pid of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
        try {
          if (!readFileSync(`/proc/${pid}/cmdline`, "utf8").startsWith(marker)) continue;
          uids.add(Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1]));
        } catch {
          // gone
        }
      }
    }, 50);
    const { result, logs } = await build({
      from: "base",
      owner: `test-userns-${tag}`,
      output,
      diskMB: 256,
      steps: [
        run(
          [
            "cat /proc/self/uid_map > /uid-map",
            "if mknod /null-x c 1 3 2>/dev/null; then echo made; else echo refused; fi > /mknod",
            "rm -f /null-x",
            // Its network namespace is the host's root's: port 80 is bindable all the same, as before.
            `perl -MIO::Socket::INET -e 'print IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 80, Listen => 1) ? "bound" : "refused: $!"' > /port-80`,
            "mkdir /opt/ids && touch /opt/ids/root && touch /opt/ids/apt && chown _apt:nogroup /opt/ids/apt",
            "cp /bin/true /opt/ids/suid && chmod 4755 /opt/ids/suid && cp /bin/true /opt/ids/capped && setcap cap_net_raw+p /opt/ids/capped",
            `bash -c 'exec -a ${marker} sleep 1.5'`,
          ].join(" && "),
          "root",
        ),
      ],
    }).finally(() => clearInterval(seen));
    expect(result.status, logs.map((l) => l.message).join("\n")).toBe("ready");
    const map = /^\s*0\s+(\d+)\s+(\d+)\s*$/.exec(builtFile(output, "uid-map") ?? "");
    expect(map, builtFile(output, "uid-map")).not.toBeNull();
    const base = Number(map![1]);
    expect([base >= 2 ** 20, Number(map![2])]).toEqual([true, 65536]);
    expect(builtFile(output, "mknod")).toBe("refused\n");
    expect(builtFile(output, "port-80")).toBe("bound");
    expect([...uids]).toEqual([base]);

    const top = store.layerTree(store.template(output)!.layers.at(-1)!);
    const apt = Number(/^_apt:x:(\d+):/m.exec(builtFile(output, "etc/passwd")!)![1]);
    const owner = (path: string) => ((st) => [st.uid, st.gid])(lstatSync(join(top, path)));
    expect(owner(".")).toEqual([0, 0]);
    expect(owner("opt/ids/root")).toEqual([0, 0]);
    expect(owner("opt/ids/apt")).toEqual([apt, 65534]);
    expect(owner("uid-map")).toEqual([0, 0]);
    const suid = lstatSync(join(top, "opt/ids/suid"));
    expect([suid.mode & 0o7777, suid.uid]).toEqual([0o4755, 0]);
    // A capability for any root (revision 2), not one tied to the step's host uid (revision 3).
    expect(execFileSync("getcap", [join(top, "opt/ids/capped")], { encoding: "utf8" })).toContain("cap_net_raw=p");
    const rev = execFileSync("python3", ["-c", "import os,sys; print(os.getxattr(sys.argv[1], 'security.capability')[3])", join(top, "opt/ids/capped")], { encoding: "utf8" });
    expect(rev.trim()).toBe("2");
  }, 120_000);

  it("a failing step ends the build with its reason, its output logged", async () => {
    const { result, logs } = await build({ from: "base", owner: `test-${tag}`, output: `direct-fail-${tag}`, steps: [run("echo direct-before-failure; exit 9")] });
    expect(result).toMatchObject({ status: "error", message: "step 1 (RUN) failed: exit code 9" });
    expect(logs.map((l) => l.message)).toContain("direct-before-failure");
    expect(store.template(`direct-fail-${tag}`)).toBeUndefined();
  }, 60_000);

  it("a step's output without newlines is logged in bounded pieces, all of it (it was one growing line, re-split per chunk on the agent's thread)", async () => {
    const { result, logs } = await build({ from: "base", owner: `test-${tag}`, output: `direct-noline-${tag}`, steps: [run("head -c 16M /dev/zero | tr '\\0' y; exit 3")] });
    expect(result).toMatchObject({ status: "error", message: "step 1 (RUN) failed: exit code 3" });
    const pieces = logs.map((l) => l.message).filter((m) => /^y+$/.test(m));
    expect(Math.max(...pieces.map((m) => m.length))).toBeLessThanOrEqual(4096);
    expect(pieces.reduce((n, m) => n + m.length, 0)).toBe(16 << 20);
  }, 120_000);
});
