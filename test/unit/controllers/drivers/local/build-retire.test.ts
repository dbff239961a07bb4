// What a deleted template's build leaves (builder/retire.ts) and the build journal (journal.ts)
// against a real RootfsStore in a temporary directory: layers go once no template names them and
// no sandbox mounts them; an unfinished build's entry survives a new journal, a finished one does not.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { TemplateBuilder } from "../../../../../controllers/drivers/local/builder/builder.ts";
import { BuildJournal, deadStepMounts } from "../../../../../controllers/drivers/local/builder/journal.ts";
import { layerIdOf, planSteps } from "../../../../../controllers/drivers/local/builder/plan.ts";
import { cacheEvictions, RetiredTemplates } from "../../../../../controllers/drivers/local/builder/retire.ts";
import { RootfsStore } from "../../../../../controllers/drivers/local/rootfs/store.ts";
import { BuildFrameSchema, type BuildEvents, type BuildFrame } from "../../../../../schema/protocol/build.ts";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
function tmp(): string {
  const d = mkdtempSync(join(tmpdir(), "build-retire-"));
  dirs.push(d);
  return d;
}

async function layer(store: RootfsStore, id: string, team?: string, usedAt?: number): Promise<void> {
  const staging = store.stagingDir(id);
  mkdirSync(join(staging, "rootfs"));
  writeFileSync(join(staging, "rootfs", "f"), id);
  await store.commitLayer(staging, { id, kind: "build", source: { step: "RUN", key: id }, ...(team ? { team } : {}) }, Date.now(), "", { bytes: 1000, files: 10 });
  if (usedAt !== undefined) utimesSync(join(store.layerDir(id), "layer.json"), usedAt / 1000, usedAt / 1000);
}

describe("RetiredTemplates", () => {
  it("removes a deleted built template's record at once and its layers once nothing names or mounts them", async () => {
    const store = new RootfsStore(tmp());
    for (const id of ["base-1", "step-a", "step-b", "step-c"]) await layer(store, id);
    store.putTemplate("b-one", ["base-1", "step-a", "step-b"]);
    store.putTemplate("b-two", ["base-1", "step-a", "step-c"]); // shares step-a
    store.putTemplate("base", ["base-1"]);
    const mounted = new Set(["step-b"]);
    const retired = new RetiredTemplates(store, async () => new Set(mounted));

    expect(await retired.retire(["b-one", "base", "not-built"])).toEqual([]);
    expect(store.template("b-one")).toBeUndefined();
    expect(store.template("base")).toBeDefined(); // not a build's: never retired
    expect(store.layer("step-a")).toBeDefined(); // b-two names it
    expect(store.layer("step-b")).toBeDefined(); // a sandbox mounts it

    mounted.clear();
    expect(await retired.sweep()).toEqual(["step-b"]);
    expect(await retired.retire(["b-two"])).toEqual(["step-a", "step-c"]);
    expect(store.layer("base-1")).toBeDefined();
    retired.dispose();
  });
});

describe("RetiredTemplates beside a running build", () => {
  it("keeps a layer a running build took from the cache of the retired template, until the build's own record names it", async () => {
    const store = new RootfsStore(tmp());
    await layer(store, "base-l");
    store.putTemplate("base", ["base-l"]);
    const frame: BuildFrame = { type: "build", buildId: "rb-1", teamId: "team", from: { rootfs: "base" }, steps: [{ type: "RUN", args: ["true"], force: false }, { type: "RUN", args: ["false"], force: false }], force: false, cpuCount: 1, memoryMB: 512, output: "b-new", filesPath: "" };
    const [first, second] = planSteps({ teamId: "team", buildId: frame.buildId, baseLayers: ["base-l"], steps: frame.steps, force: false }).steps.map((p) => layerIdOf(p.key));
    // The old build of the same template published the first step; only its record names it.
    await layer(store, first!);
    store.putTemplate("b-old", ["base-l", first!]);
    // A live owner holds the second step's claim: the build waits there, its first step cached.
    const stat = readFileSync(`/proc/${process.pid}/stat`, "utf8");
    writeFileSync(join(store.root, "layers", `.claim-${second!}`), `${process.pid} ${stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]}`);
    const items: BuildEvents["items"] = [];
    const builder = new TemplateBuilder({ store, fetchFile: () => Promise.reject(new Error("no files")), send: (it) => (items.push(...it), true), stepTimeoutMs: 600_000, flushMs: 10 });
    builder.start(frame);
    await expect.poll(() => items.some((i) => i.logs.some((l) => l.message.includes("waiting for another build"))), { timeout: 5_000, interval: 20 }).toBe(true);
    expect(items.some((i) => i.logs.some((l) => l.message.startsWith("CACHED")))).toBe(true);

    const retired = new RetiredTemplates(store, async () => new Set(), () => builder.layersHeld());
    expect(await retired.retire(["b-old"])).toEqual([]);
    expect(store.template("b-old")).toBeUndefined();
    expect(store.layer(first!)).toBeDefined();
    builder.dispose();
    await expect.poll(() => items.find((i) => i.result)?.result, { timeout: 5_000, interval: 20 }).toMatchObject({ status: "error" });
    // The build ended without a record: the layer is nobody's now.
    expect(await retired.sweep()).toEqual([first]);
    retired.dispose();
  });
});

describe("BuildJournal", () => {
  it("keeps unfinished builds with their next log seq, drops finished and damaged ones", () => {
    const dir = tmp();
    const frame = BuildFrameSchema.parse({ type: "build", buildId: "0b6f4c1e-1", teamId: "t", from: { rootfs: "base" }, steps: [], force: false, output: "b-0b6f4c1e-1", filesPath: "/agent/v1/builds/0b6f4c1e-1/files/", cpuCount: 1, memoryMB: 512 });
    const j = new BuildJournal(dir);
    j.put({ frame, seq: 7 });
    j.put({ frame: { ...frame, buildId: "done-1", output: "b-done-1" }, seq: 1 });
    j.done("done-1");
    writeFileSync(join(dir, "bad.json"), "{");
    const bad: string[] = [];
    expect(new BuildJournal(dir).list((f) => bad.push(f))).toEqual([{ frame, seq: 7 }]);
    expect(bad).toEqual(["bad.json"]);
    expect(() => j.put({ frame: { ...frame, buildId: "../x" }, seq: 0 })).toThrow(/not a file name/);
  });
});

describe("deadStepMounts", () => {
  it("finds a dead builder's mounts from the mount table, also those whose staging directory is gone, deepest first", () => {
    const line = (at: string) => `36 25 0:32 / ${at} rw,relatime shared:1 - overlay overlay rw`;
    const layers = "/store/layers";
    const mountinfo = [
      line("/"),
      line("/run/kruise-builds/.build-step-a-100-1796425112692/root"), // dead pid 100, no staging directory
      line("/run/kruise-builds/.build-step-b-200-1796425112693/root"), // live pid 200
      line("/run/kruise-builds/.build-step-c-100-1796425112694"), // an older agent's layout
      line("/store/layers/.build-step-d-100-1796425112695/disk"),
      line("/store/layers/.build-step-d-100-1796425112695/lower/0"),
      line("/store/layers/.build-step-e-200-1796425112696/disk"),
      line("/store/layers/step-f/rootfs"), // a layer, not a staging directory
      line("/run/kruise-builds/other/root"),
      line(String.raw`/store/layers/.build\040odd-100-1/disk`), // not a builder's name: left
    ].join("\n");
    expect(deadStepMounts(layers, (pid) => pid === "200", mountinfo, "/run/kruise-builds")).toEqual([
      "/run/kruise-builds/.build-step-a-100-1796425112692/root",
      "/store/layers/.build-step-d-100-1796425112695/lower/0",
      "/run/kruise-builds/.build-step-c-100-1796425112694",
      "/store/layers/.build-step-d-100-1796425112695/disk",
    ]);
  });
});

describe("cacheEvictions", () => {
  it("evicts least recently used first until both the bytes and the files fit", () => {
    const l = (id: string, usedAt: number, bytes: number, files: number) => ({ id, usedAt, bytes, files });
    const cached = [l("new", 30, 400, 1), l("old", 10, 400, 1), l("mid", 20, 400, 1)];
    expect(cacheEvictions(cached, { bytes: 1200, files: 100 })).toEqual([]);
    expect(cacheEvictions(cached, { bytes: 1000, files: 100 })).toEqual(["old"]);
    expect(cacheEvictions(cached, { bytes: 400, files: 100 })).toEqual(["old", "mid"]);
    expect(cacheEvictions(cached, { bytes: 399, files: 100 })).toEqual(["old", "mid", "new"]);
    // Files bound it as bytes do: empty files cost inodes.
    expect(cacheEvictions([l("a", 1, 0, 900), l("b", 2, 0, 900)], { bytes: 1 << 30, files: 1000 })).toEqual(["a"]);
  });
});

describe("RetiredTemplates.trim (a team's layer cache bound)", () => {
  it("evicts the team's least recently used layers that nothing uses, and nothing of other teams, bases or what is used", async () => {
    const store = new RootfsStore(tmp());
    const t = Date.now() - 3_600_000;
    await layer(store, "base-1", undefined, t);
    store.putTemplate("base", ["base-1"]);
    // Team a: oldest first. a-named is in a template record, a-mounted in a sandbox, a-held in a running build.
    for (const [i, id] of ["a-named", "a-mounted", "a-held", "a-old", "a-mid", "a-new"].entries()) await layer(store, id, "a", t + i * 1000);
    store.putTemplate("b-a", ["base-1", "a-named"]);
    await layer(store, "b-old", "b", t - 1000);
    await layer(store, "legacy", undefined, t - 1000); // an older agent's build: no team
    const retired = new RetiredTemplates(store, async () => new Set(["a-mounted"]), () => ["a-held"]);
    // Three unused layers of a (3000 bytes, 30 files); the bound keeps two.
    expect(await retired.trim("a", { bytes: 2000, files: 1000 })).toEqual(["a-old"]);
    expect(await retired.trim("a", { bytes: 2000, files: 15 })).toEqual(["a-mid"]);
    expect(store.layers().map((l) => l.id).sort()).toEqual(["a-held", "a-mounted", "a-named", "a-new", "b-old", "base-1", "legacy"]);
    expect(await retired.trim("a", { bytes: 0, files: 0 })).toEqual(["a-new"]);
    expect(store.layer("b-old") && store.layer("legacy") && store.layer("base-1") && store.layer("a-named") && store.layer("a-mounted") && store.layer("a-held")).toBeTruthy();
    retired.dispose();
  });
});

describe("TemplateBuilder and the layer cache", () => {
  it("marks a cached layer used when a build takes it, and says which team's build ended", async () => {
    const store = new RootfsStore(tmp());
    await layer(store, "base-l");
    store.putTemplate("base", ["base-l"]);
    const frame: BuildFrame = { type: "build", buildId: "rc-1", teamId: "team-c", from: { rootfs: "base" }, steps: [{ type: "RUN", args: ["true"], force: false }], force: false, cpuCount: 1, memoryMB: 512, output: "b-rc-1", filesPath: "" };
    const [step] = planSteps({ teamId: "team-c", buildId: frame.buildId, baseLayers: ["base-l"], steps: frame.steps, force: false }).steps.map((p) => layerIdOf(p.key));
    const long = Date.now() - 86_400_000;
    await layer(store, step!, "team-c", long);
    const ended: string[] = [];
    const items: BuildEvents["items"] = [];
    const builder = new TemplateBuilder({ store, fetchFile: () => Promise.reject(new Error("no files")), send: (it) => (items.push(...it), true), flushMs: 10, onBuildEnd: (team) => ended.push(team) });
    builder.start(frame);
    await expect.poll(() => items.find((i) => i.result)?.result, { timeout: 5_000, interval: 20 }).toMatchObject({ status: "ready" });
    expect(items.some((i) => i.logs.some((l) => l.message.startsWith("CACHED")))).toBe(true);
    expect(statSync(join(store.layerDir(step!), "layer.json")).mtimeMs).toBeGreaterThan(Date.now() - 60_000);
    expect(store.layers().find((l) => l.id === step)?.team).toBe("team-c");
    expect(ended).toEqual(["team-c"]);
    builder.dispose();
  });
});
