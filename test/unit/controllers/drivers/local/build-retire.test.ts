// What a deleted template's build leaves (builder/retire.ts) and the build journal (journal.ts)
// against a real RootfsStore in a temporary directory: layers go once no template names them and
// no sandbox mounts them; an unfinished build's entry survives a new journal, a finished one does not.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { TemplateBuilder } from "../../../../../controllers/drivers/local/builder/builder.ts";
import { BuildJournal, deadStepMounts } from "../../../../../controllers/drivers/local/builder/journal.ts";
import { layerIdOf, planSteps } from "../../../../../controllers/drivers/local/builder/plan.ts";
import { RetiredTemplates } from "../../../../../controllers/drivers/local/builder/retire.ts";
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

async function layer(store: RootfsStore, id: string): Promise<void> {
  const staging = store.stagingDir(id);
  mkdirSync(join(staging, "rootfs"));
  writeFileSync(join(staging, "rootfs", "f"), id);
  await store.commitLayer(staging, { id, kind: "build", source: { step: "RUN", key: id } }, Date.now(), "");
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
