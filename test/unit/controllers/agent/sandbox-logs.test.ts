// The agent's per-sandbox log store: bounded per sandbox and per entry, queried as E2B's logs
// routes ask (cursor, direction, level, search, limit), and fed by every log line naming a sandbox.
import { describe, expect, it } from "vitest";
import { SandboxLogs } from "../../../../controllers/agent/sandbox-logs.ts";
import { logger, tapLogs, configureLogs } from "../../../../controllers/lib/log.ts";
import { MAX_LOG_FIELDS, MAX_LOG_FIELD_VALUE_LENGTH, MAX_LOG_MESSAGE_LENGTH, SandboxLogEntrySchema } from "../../../../schema/api/sandbox-logs.ts";

describe("SandboxLogs", () => {
  it("keeps only the newest entries of a sandbox, and each entry within the frame's bounds", () => {
    const logs = new SandboxLogs({ perSandbox: 10 });
    for (let i = 0; i < 25; i++) logs.append("a", "info", `line ${i}`, {}, 1000 + i);
    logs.append("a", "info", "x".repeat(10_000), Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`k${i}`, "v".repeat(2000)])), 2000);
    const all = logs.query("a", { limit: 1000, direction: "forward" });
    expect(all.length).toBe(10);
    expect(all[0]!.message).toBe("line 16");
    const big = all.at(-1)!;
    expect(big.message.length).toBe(MAX_LOG_MESSAGE_LENGTH);
    expect(Object.keys(big.fields).length).toBe(MAX_LOG_FIELDS);
    expect(Object.values(big.fields).every((v) => v.length <= MAX_LOG_FIELD_VALUE_LENGTH)).toBe(true);
    expect(SandboxLogEntrySchema.safeParse(big).success).toBe(true);
    expect(logs.query("b", { limit: 10, direction: "forward" })).toEqual([]);
  });

  it("queries forward from a cursor, backward up to it, by level and substring", () => {
    const logs = new SandboxLogs();
    logs.append("a", "debug", "one", {}, 1);
    logs.append("a", "info", "two", {}, 2);
    logs.append("a", "error", "three", {}, 3);
    const msgs = (q: Parameters<SandboxLogs["query"]>[1]) => logs.query("a", q).map((e) => e.message);
    expect(msgs({ limit: 10, direction: "forward", start: 2 })).toEqual(["two", "three"]);
    expect(msgs({ limit: 10, direction: "backward", start: 2 })).toEqual(["two", "one"]);
    expect(msgs({ limit: 1, direction: "backward" })).toEqual(["three"]);
    expect(msgs({ limit: 10, direction: "forward", level: "info" })).toEqual(["two", "three"]);
    expect(msgs({ limit: 10, direction: "forward", search: "t" })).toEqual(["two", "three"]);
    logs.drop("a");
    expect(msgs({ limit: 10, direction: "forward" })).toEqual([]);
  });

  it("sees every logger line through a tap, with its fields", () => {
    const seen: unknown[] = [];
    configureLogs({ write: () => {} });
    const untap = tapLogs((level, component, msg, fields) => seen.push({ level, component, msg, fields }));
    logger("runtime").with({ sandboxId: "s1" }).warn("process exited", { exitCode: 2 });
    untap();
    logger("runtime").info("after");
    expect(seen).toEqual([{ level: "warn", component: "runtime", msg: "process exited", fields: { sandboxId: "s1", exitCode: 2 } }]);
  });
});
