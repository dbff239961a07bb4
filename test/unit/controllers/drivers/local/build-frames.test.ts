// The size of the builder's buildEvents frames: tenant output is up to 4 KiB a log line and 6
// bytes a character as JSON (control characters), so several builds' worth of lines in one frame
// could pass workerd's 32 MiB per WebSocket message, and the edge's runtime would close the
// cluster's session. The step is a stand-in (runStep mocked: it prints and makes an empty layer),
// so this runs without root.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { TemplateBuilder } from "../../../../../controllers/drivers/local/builder/builder.ts";
import { RootfsStore } from "../../../../../controllers/drivers/local/rootfs/store.ts";
import { MAX_ENV_VALUE_LENGTH, MAX_MESSAGE_LENGTH, MAX_TEMPLATE_CONFIG_BYTES } from "../../../../../schema/api/limits.ts";
import { FRAME_MAX_BYTES, jsonBytes } from "../../../../../schema/protocol/batches.ts";
import type { BuildEvents, BuildFrame } from "../../../../../schema/protocol/build.ts";

const BUILDS = 4;
/** Each build's final env: as many full values of control characters as MAX_TEMPLATE_CONFIG_BYTES
 * holds (~1 MiB of ready result each, which rides in the frame beside the lines). */
const ENV = Object.fromEntries(Array.from({ length: Math.floor(MAX_TEMPLATE_CONFIG_BYTES / (6 * MAX_ENV_VALUE_LENGTH + 16)) }, (_, i) => [`V${i}`, "\u0001".repeat(MAX_ENV_VALUE_LENGTH)]));
const LINES = 600;
let printed = 0;
let allPrinted: () => void;
const printedAll = new Promise<void>((ok) => (allPrinted = ok));

vi.mock("../../../../../controllers/drivers/local/builder/sandbox.ts", async (importOriginal) => ({
  ...(await importOriginal<typeof import("../../../../../controllers/drivers/local/builder/sandbox.ts")>()),
  // Every build prints all its lines before any ends, so flushes find several builds' lines pending.
  runStep: async (r: { staging: string; onLine(l: string, s: "stdout" | "stderr"): void }) => {
    mkdirSync(join(r.staging, "rootfs"), { recursive: true });
    for (let i = 0; i < LINES; i++) r.onLine("\u0001".repeat(MAX_MESSAGE_LENGTH), "stdout");
    if (++printed === BUILDS) allPrinted();
    await printedAll;
    return { code: 0, diskFull: undefined };
  },
}));

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe("TemplateBuilder's frames", () => {
  it("stay within FRAME_MAX_BYTES however much the builds print and however large their results, and every line (in order) and result still arrives", async () => {
    const store = new RootfsStore(mkdtempSync(join(tmpdir(), "build-frames-")));
    dirs.push(store.root);
    const staging = store.stagingDir("base-l");
    mkdirSync(join(staging, "rootfs"));
    writeFileSync(join(staging, "rootfs", "f"), "base");
    await store.commitLayer(staging, { id: "base-l", kind: "build", source: { step: "RUN", key: "base-l" } }, Date.now(), "", { bytes: 1000, files: 10 });
    store.putTemplate("base", ["base-l"]);
    const frames: number[] = [];
    const items: BuildEvents["items"] = [];
    const b = new TemplateBuilder({ store, flushMs: 10, fetchFile: () => Promise.reject(new Error("no files")), send: (it) => (frames.push(jsonBytes({ type: "buildEvents", items: it })), items.push(...it), true) });
    for (let i = 0; i < BUILDS; i++) {
      const frame: BuildFrame = { type: "build", buildId: `loud-${i}`, teamId: "team", from: { rootfs: "base" }, steps: [{ type: "RUN", args: [`print ${i}`], force: false }], force: false, cpuCount: 1, memoryMB: 512, config: { user: "user", workdir: "/home/user", env: ENV }, output: `b-loud-${i}`, filesPath: "" };
      b.start(frame);
    }
    await expect.poll(() => items.filter((i) => i.result).length, { timeout: 10_000, interval: 50 }).toBe(BUILDS);
    b.dispose();
    expect(Math.max(...frames)).toBeLessThanOrEqual(FRAME_MAX_BYTES + 4096);
    for (let i = 0; i < BUILDS; i++) {
      const mine = items.filter((it) => it.buildId === `loud-${i}`);
      expect(mine.at(-1)!.result).toMatchObject({ status: "ready", env: ENV });
      const seqs = mine.flatMap((it) => it.logs).map((l) => l.seq);
      expect(seqs).toEqual(seqs.map((_, k) => k));
      const lines = mine.flatMap((it) => it.logs).filter((l) => l.message.startsWith("\u0001"));
      expect(lines.length).toBe(LINES);
    }
  });
});
