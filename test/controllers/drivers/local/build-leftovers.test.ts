// Template builds sharing this machine's layer store (builder/step-claim.ts, builder/dead-cgroups.ts):
// two builds of the same step at once run it once (the second waits and finds it cached), and a
// direct build killed with SIGKILL mid-step leaves its cgroups, its step's processes, mounts and claim
// only until the next direct build starts; and a build the agent gives up because the link refuses
// its frames (builder.ts SEND_FAILURES) is stopped at once, its step's processes, staging and
// cgroup gone, and ends as an error the edge gets. Needs root (the global setup built `base`).
import { execFileSync, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, describe, expect, it } from "vitest";
import { deadDirectBuildCgroups } from "../../../../controllers/drivers/local/builder/dead-cgroups.ts";
import { TemplateBuilder } from "../../../../controllers/drivers/local/builder/builder.ts";
import { detectCgroups } from "../../../../controllers/drivers/local/cgroups.ts";
import { UidRanges } from "../../../../controllers/drivers/local/uid-range.ts";
import { usernsUnavailable } from "../../../../controllers/drivers/local/userns.ts";
import { runDirectBuild, type DirectBuild } from "../../../../controllers/drivers/local/builder/direct-build.ts";
import { layerIdOf, planSteps } from "../../../../controllers/drivers/local/builder/plan.ts";
import { RootfsStore } from "../../../../controllers/drivers/local/rootfs/store.ts";
import { STEP_ROOTS } from "../../../../controllers/drivers/local/builder/sandbox.ts";
import { TemplateStep } from "../../../../schema/api/template-build.ts";
import type { BuildEvents, BuildLog } from "../../../../schema/protocol/build.ts";
import { removeBuiltLayers } from "../../../support/built-layers.ts";

const ROOT = resolve(import.meta.dirname, "../../../..");
const store = new RootfsStore();
const since = Date.now();
const tag = randomUUID().slice(0, 8);
const outputs: string[] = [];

afterAll(() => removeBuiltLayers(store, outputs, since));

const run = (command: string, user = "") => TemplateStep.parse({ type: "RUN", args: [command, user] });

async function build(b: DirectBuild): Promise<{ status: string; layers: string[]; messages: string[] }> {
  const logs: BuildLog[] = [];
  outputs.push(b.output);
  const r = await runDirectBuild(b, (l) => logs.push(l), store);
  return { status: r.status, layers: r.layers, messages: logs.map((l) => l.message) };
}

/** Processes whose command line has `marker`. */
function processesWith(marker: string): number[] {
  const found: number[] = [];
  for (const pid of readdirSync("/proc").filter((n) => /^\d+$/.test(n))) {
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(marker)) found.push(Number(pid));
    } catch {
      // gone
    }
  }
  return found;
}

/** Starts a direct build in a process of its own and kills it with SIGKILL once its step printed "started". */
async function killedMidStep(b: DirectBuild): Promise<{ pid: number }> {
  const child = spawn(join(ROOT, "node_modules/.bin/node"), ["test/support/direct-build-child.ts", JSON.stringify(b)], { cwd: ROOT, stdio: ["ignore", "pipe", "inherit"] });
  const lines = createInterface({ input: child.stdout! });
  await new Promise<void>((ok, fail) => {
    lines.on("line", (l) => l === "started" && ok());
    child.once("exit", (code) => fail(new Error(`the build ended first (${code})`)));
  });
  child.kill("SIGKILL");
  await new Promise((r) => child.once("close", r));
  return { pid: child.pid! };
}

/** Mount points in the host's table whose path names a staging directory of `pid`. */
function mountsOf(pid: number): string[] {
  return readFileSync("/proc/self/mountinfo", "utf8").split("\n").map((l) => l.split(" ")[4] ?? "").filter((p) => p.includes(`-${pid}-`));
}

describe("builds sharing the layer store", () => {
  it("two builds of the same step at once run it once: the second waits for the first and finds its layer cached", async () => {
    const steps = [run(`echo ran-${tag}; sleep 3; echo ${tag} > /home/user/once`)];
    const [a, b] = await Promise.all([
      build({ from: "base", owner: `test-${tag}`, output: `claim-a-${tag}`, steps }),
      build({ from: "base", owner: `test-${tag}`, output: `claim-b-${tag}`, steps }),
    ]);
    expect([a.status, b.status]).toEqual(["ready", "ready"]);
    const ran = [a, b].filter((x) => x.messages.includes(`ran-${tag}`));
    expect(ran).toHaveLength(1);
    const other = ran[0] === a ? b : a;
    expect(other.messages.some((m) => /^\[1\/1\] RUN .*: waiting for another build of the same step on this machine \(pid \d+\) to finish$/.test(m))).toBe(true);
    expect(other.messages.some((m) => m.startsWith("CACHED [1/1] RUN"))).toBe(true);
    expect(a.layers).toEqual(b.layers);
  }, 120_000);

  it("a direct build killed with SIGKILL mid-step: the next direct build kills the step's processes and removes its cgroups and claim, then builds", async () => {
    const marker = `killed-step-${tag}`;
    const b: DirectBuild = { from: "base", owner: `test-${tag}`, output: `killed-${tag}`, steps: [run(`echo started; exec -a ${marker} sleep 600`)] };
    const child = await killedMidStep(b);
    const cgroupName = `kruise-builds-direct-${child.pid}`;
    const layersDir = join(store.root, "layers");
    const layer = layerIdOf(planSteps({ teamId: b.owner, buildId: "", baseLayers: store.template("base")!.layers, steps: b.steps, force: false }).steps[0]!.key);
    // What the kill left: the cgroups and the step's claim (bwrap's --die-with-parent ends the
    // step's processes with it, mostly; any that outlive it are killed below).
    expect(deadDirectBuildCgroups().filter((d) => d.endsWith(`/${cgroupName}`)).length).toBeGreaterThan(0);
    expect(existsSync(join(layersDir, `.claim-${layer}`))).toBe(true);

    const next = await build({ ...b, output: `after-kill-${tag}`, steps: [run("echo started")] });
    expect(next.status).toBe("ready");
    expect(next.messages.filter((m) => m.includes(`/${cgroupName} of a build killed`)).length).toBeGreaterThan(0);
    expect(deadDirectBuildCgroups().filter((d) => d.endsWith(`/${cgroupName}`))).toEqual([]);
    expect(processesWith(marker)).toEqual([]);
    expect(existsSync(join(layersDir, `.claim-${layer}`))).toBe(false);
    expect(readdirSync(layersDir).filter((n) => n.includes(`-${child.pid}-`))).toEqual([]);
    // Its step's overlay and disk are unmounted, not only their directories removed.
    expect(readFileSync("/proc/self/mountinfo", "utf8").split("\n").filter((l) => l.includes(`-${child.pid}-`))).toEqual([]);
  }, 120_000);

  it("a direct build killed mid-step whose staging directory is then gone: the next direct build still unmounts the step's root", async () => {
    const b: DirectBuild = { from: "base", owner: `test-${tag}`, output: `gone-${tag}`, steps: [run(`echo started; exec -a gone-step-${tag} sleep 600`)] };
    const child = await killedMidStep(b);
    const layersDir = realpathSync(join(store.root, "layers"));
    const staging = readdirSync(layersDir).filter((n) => n.startsWith(".build-") && n.includes(`-${child.pid}-`));
    expect(staging).toHaveLength(1);
    // What leaves a step's root behind its staging directory: the staging directory removed (as an
    // older agent's sweep did, or a person) with only the mounts under it undone.
    const dir = join(layersDir, staging[0]!);
    for (const at of mountsOf(child.pid).filter((p) => p.startsWith(`${dir}/`)).sort((x, y) => y.length - x.length)) execFileSync("umount", ["-l", at]);
    execFileSync("rm", ["-rf", "--one-file-system", dir]);
    const left = mountsOf(child.pid);
    expect(left.length, "the step's root is mounted at STEP_ROOTS (a step with a user namespace)").toBeGreaterThan(0);
    expect(left.every((p) => p.startsWith(`${STEP_ROOTS}/`))).toBe(true);

    const next = await build({ ...b, output: `after-gone-${tag}`, steps: [run("echo started")] });
    expect(next.status).toBe("ready");
    expect(mountsOf(child.pid)).toEqual([]);
    expect(readdirSync(STEP_ROOTS).filter((n) => n.includes(`-${child.pid}-`))).toEqual([]);
    expect(processesWith(`gone-step-${tag}`)).toEqual([]);
  }, 120_000);

  it("a build whose frames the link refuses is stopped: no process of its step is left, its staging and cgroup go, and the edge gets its end as an error", async () => {
    const marker = `given-up-${tag}`;
    const cgroups = detectCgroups(`kruise-builds-test-${tag}`).layout;
    const journal = mkdtempSync(join(tmpdir(), "build-given-up-"));
    const sent: BuildEvents["items"] = [];
    let refusing = false;
    const b = new TemplateBuilder({
      store,
      cgroups,
      journalDir: journal,
      flushMs: 50,
      fetchFile: () => Promise.reject(new Error("no files")),
      // Once the step runs, every frame with its lines is refused, as the link's own check refuses one.
      send: (items) => {
        if (refusing && items.some((i) => i.logs.length)) throw new Error("agent frame invalid");
        sent.push(...items);
        return "ack";
      },
      uids: usernsUnavailable() ?? new UidRanges(),
    });
    try {
      // It prints (so frames go, and are refused) and sleeps under a name we can find.
      const step = TemplateStep.parse({ type: "RUN", args: [`(while :; do echo tick; sleep 0.05; done) & exec -a ${marker} sleep 600`, "root"] });
      b.start({ type: "build", buildId: `given-up-${tag}`, teamId: `test-${tag}`, from: { rootfs: "base" }, steps: [step], force: false, cpuCount: 1, memoryMB: 512, output: `given-up-${tag}`, filesPath: "" });
      await expect.poll(() => processesWith(marker).length > 0, { timeout: 60_000, interval: 100 }).toBe(true);
      await expect.poll(() => sent.some((i) => i.logs.some((l) => l.message === "tick")), { timeout: 10_000, interval: 50 }).toBe(true);
      refusing = true;
      await expect.poll(() => sent.find((i) => i.result)?.result, { timeout: 30_000, interval: 100 }).toEqual({ status: "error", message: "the build's events could not be sent to the edge (see the agent's log): it was stopped" });
      // The result is sent once the run stopped: its processes, staging and cgroup are gone by then.
      expect(processesWith(marker)).toEqual([]);
      const staging = (dir: string) => (existsSync(dir) ? readdirSync(dir).filter((n) => n.startsWith(".build-") && n.includes(`-${process.pid}-`)) : []);
      expect(staging(realpathSync(join(store.root, "layers")))).toEqual([]);
      expect(staging(STEP_ROOTS)).toEqual([]);
      if (cgroups) for (const parent of [cgroups.coreParent, ...Object.values(cgroups.v1Parents)]) expect(readdirSync(parent).filter((n) => n.startsWith(`given-up-${tag}`))).toEqual([]);
      // Kept in the journal (with its end) until the edge acks it.
      expect(readdirSync(journal)).toEqual([`given-up-${tag}.json`]);
      b.acked([`given-up-${tag}`]);
      expect(readdirSync(journal)).toEqual([]);
    } finally {
      // A failure before the refusal would leave the step running until the test process exits
      // (dispose ends only claim waits), and its cgroups behind: refused, it is stopped.
      refusing = true;
      for (const end = Date.now() + 30_000; processesWith(marker).length && Date.now() < end; ) await new Promise((r) => setTimeout(r, 100));
      b.dispose();
      rmSync(journal, { recursive: true, force: true });
    }
  }, 120_000);
});
