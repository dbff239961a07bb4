// What the builder reports at a build's end when that report cannot go out as it is: a final config
// past the agent link's schema (schema/protocol/build.ts BuildResultSchema) ends the build as an
// error before any step runs, and a send the link refuses (it throws, as its own frame check does)
// neither escapes the builder's timer (an agent crash) nor leaves the build in the journal to
// replay into the same throw after a restart. ENV-only builds: no step runs, no root needed.
import { readdirSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { TemplateBuilder } from "../../../../../controllers/drivers/local/builder/builder.ts";
import { RootfsStore } from "../../../../../controllers/drivers/local/rootfs/store.ts";
import { MAX_ENV_VALUE_LENGTH, MAX_ENV_VARS, MAX_TEMPLATE_CONFIG_BYTES } from "../../../../../schema/api/limits.ts";
import { FRAME_MAX_BYTES, jsonBytes } from "../../../../../schema/protocol/batches.ts";
import type { BuildEvents, BuildFrame } from "../../../../../schema/protocol/build.ts";
import { AgentMessageSchema } from "../../../../../schema/protocol/messages.ts";
import { storeWithBase as baseStore, tmpDirs } from "./build-store.ts";

const { tmp, removeTmp } = tmpDirs("build-result-");
const builders: TemplateBuilder[] = [];
afterEach(() => {
  for (const b of builders.splice(0)) b.dispose();
  removeTmp();
});
const storeWithBase = () => baseStore(tmp());

/** A builder whose send refuses what the edge would refuse, as the link's self-check does: it throws. */
function builder(store: RootfsStore, journalDir: string, refuse: (items: BuildEvents["items"]) => boolean = () => false, up: () => boolean = () => true) {
  const sent: BuildEvents["items"] = [];
  const logs: string[] = [];
  const frames: number[] = [];
  const b = new TemplateBuilder({
    store,
    journalDir,
    flushMs: 10,
    log: (msg) => logs.push(msg),
    fetchFile: () => Promise.reject(new Error("no files")),
    send: (items) => {
      if (!up()) return false;
      const checked = AgentMessageSchema.safeParse({ type: "buildEvents", items });
      if (!checked.success) throw new Error(`agent frame invalid: ${checked.error.message}`);
      if (refuse(items)) throw new Error("the link refused the frame");
      sent.push(...items);
      frames.push(jsonBytes({ type: "buildEvents", items }));
      return true;
    },
  });
  builders.push(b);
  return { b, sent, logs, frames };
}

function frame(buildId: string, steps: BuildFrame["steps"], config?: BuildFrame["config"]): BuildFrame {
  return { type: "build", buildId, teamId: "team", from: { rootfs: "base" }, steps, ...(config ? { config } : {}), force: false, cpuCount: 1, memoryMB: 512, output: `b-${buildId}`, filesPath: "" };
}

describe("TemplateBuilder: a result the agent link cannot carry", () => {
  it("a final config past the link's bounds (a long ENV value, a long WORKDIR, a base's env plus the steps' past the count) ends the build as an error, its journal entry done", async () => {
    const store = await storeWithBase();
    const journal = tmp();
    const { b, sent } = builder(store, journal);
    const baseEnv = Object.fromEntries(Array.from({ length: MAX_ENV_VARS - 2 }, (_, i) => [`B${i}`, "x"]));
    b.start(frame("long-value", [{ type: "ENV", args: ["A", "x".repeat(MAX_ENV_VALUE_LENGTH + 1)], force: false }]));
    b.start(frame("long-workdir", [{ type: "ENV", args: ["A", "1"], force: false }], { user: "user", workdir: "/" + "d/".repeat(2100), env: {} }));
    b.start(frame("many-vars", [{ type: "ENV", args: ["C1", "1", "C2", "2", "C3", "3"], force: false }], { user: "user", workdir: "/home/user", env: baseEnv }));
    await expect.poll(() => sent.filter((i) => i.result).length, { timeout: 5_000, interval: 20 }).toBe(3);
    const result = (id: string) => sent.find((i) => i.buildId === id && i.result)!.result!;
    expect(result("long-value")).toMatchObject({ status: "error", step: "finalize", message: expect.stringMatching(/final config exceeds.*env\.A/) });
    expect(result("long-workdir")).toMatchObject({ status: "error", message: expect.stringMatching(/workdir/) });
    expect(result("many-vars")).toMatchObject({ status: "error", message: expect.stringMatching(new RegExp(`at most ${MAX_ENV_VARS} env vars`)) });
    expect(store.template("b-long-value")).toBeUndefined();
    expect(readdirSync(journal)).toEqual([]);
    expect(b.active).toBe(0);
  });

  it("a final config within the link's counts but past MAX_TEMPLATE_CONFIG_BYTES as JSON (a fromTemplate chain of ENV-only builds: 256 full values of control characters, ~50 MB) ends as an error, never as a frame past FRAME_MAX_BYTES", async () => {
    const store = await storeWithBase();
    const journal = tmp();
    const { b, sent, frames } = builder(store, journal);
    const env = Object.fromEntries(Array.from({ length: MAX_ENV_VARS }, (_, i) => [`V${i}`, "\u0001".repeat(MAX_ENV_VALUE_LENGTH)]));
    b.start(frame("chained", [{ type: "ENV", args: ["V0", "y"], force: false }], { user: "user", workdir: "/home/user", env }));
    await expect.poll(() => sent.find((i) => i.result)?.result, { timeout: 10_000, interval: 20 }).toMatchObject({ status: "error", step: "finalize", message: expect.stringMatching(new RegExp(`bytes as JSON, more than the ${MAX_TEMPLATE_CONFIG_BYTES}`)) });
    expect(Math.max(...frames)).toBeLessThanOrEqual(FRAME_MAX_BYTES);
    expect(store.template("b-chained")).toBeUndefined();
    expect(readdirSync(journal)).toEqual([]);
  });

  it("a send the link refuses is logged, not thrown: the build's end goes out as an error next time, and a build that cannot send at all is given up", async () => {
    const store = await storeWithBase();
    const journal = tmp();
    // The first frame with a ready result is refused, later ones go.
    let refused = 0;
    const once = builder(store, journal, (items) => items.some((i) => i.result?.status === "ready") && refused++ === 0);
    once.b.start(frame("refused-once", [{ type: "ENV", args: ["A", "1"], force: false }]));
    await expect.poll(() => once.sent.find((i) => i.result)?.result, { timeout: 5_000, interval: 20 }).toMatchObject({ status: "error", message: expect.stringMatching(/could not be sent.*refused/) });
    expect(once.logs.some((l) => l.startsWith("build events not sent"))).toBe(true);
    expect(readdirSync(journal)).toEqual([]);

    const never = builder(store, journal, () => true);
    never.b.start(frame("refused-always", [{ type: "ENV", args: ["A", "1"], force: false }]));
    await expect.poll(() => never.b.active, { timeout: 5_000, interval: 20 }).toBe(0);
    expect(never.logs).toContain("build given up: its events cannot be sent; stopping it");
    // Its end (GIVEN_UP) is refused too here: it is forgotten, not kept sending.
    expect(never.logs).toContain("build forgotten: even its end cannot be sent");
    expect(readdirSync(journal)).toEqual([]);
  });

  it("a refused frame of several builds costs only the build whose item is refused alone: another build's ready result and lines arrive as they are", async () => {
    const store = await storeWithBase();
    let up = false;
    // Both builds end while the link is down, so their results go in one frame when it returns.
    let together = false;
    const refuseBad = (items: BuildEvents["items"]) => {
      const bad = items.some((i) => i.buildId === "bad" && i.result?.status === "ready");
      together ||= bad && items.some((i) => i.buildId === "good" && i.result);
      return bad;
    };
    const { b, sent } = builder(store, tmp(), refuseBad, () => up);
    b.start(frame("good", [{ type: "ENV", args: ["A", "1"], force: false }]));
    b.start(frame("bad", [{ type: "ENV", args: ["A", "1"], force: false }]));
    // Both ended (not a fixed wait: a loaded machine may take longer), then the link comes back.
    await expect.poll(() => ["good", "bad"].every((id) => store.template(`b-${id}`) !== undefined), { timeout: 5_000, interval: 20 }).toBe(true);
    up = true;
    await expect.poll(() => sent.filter((i) => i.result).length, { timeout: 5_000, interval: 20 }).toBe(2);
    expect(together).toBe(true);
    const good = sent.filter((i) => i.buildId === "good");
    expect(good.find((i) => i.result)!.result).toMatchObject({ status: "ready", env: { A: "1" } });
    expect(good.flatMap((i) => i.logs).map((l) => l.message)).not.toContainEqual(expect.stringMatching(/could not be sent/));
    expect(sent.find((i) => i.buildId === "bad" && i.result)!.result).toMatchObject({ status: "error", message: expect.stringMatching(/could not be sent.*refused/) });
  });
});
