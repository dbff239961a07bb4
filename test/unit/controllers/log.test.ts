// The agent's structured log lines: one JSON object per line with time, level, msg, component and
// the fields (ids as fields, errors as their message), or a text line for a terminal.
import { describe, expect, it } from "vitest";
import { configureLogs, formatLine, logger, parseLogFormat, traceLogsBy, type LogLevel } from "../../../controllers/lib/log.ts";

const T = new Date("2026-12-01T10:00:00.000Z");

describe("agent logs", () => {
  it("json: one object per line with the fixed keys first and the fields after", () => {
    const lines: [string, LogLevel][] = [];
    configureLogs({ format: "json", write: (l, level) => lines.push([l, level]), now: () => T });
    const log = logger("reconciler").with({ cluster: "local" });
    log.info("phase", { sandboxId: "sbx-1", phase: "Running", reason: undefined });
    log.error("reconcile failed", { sandboxId: "sbx-2", error: new Error("boom\nsecond line") });
    expect(lines.map(([l]) => l.includes("\n"))).toEqual([false, false]);
    expect(lines.map(([l, level]) => [JSON.parse(l), level])).toEqual([
      [{ time: "2026-12-01T10:00:00.000Z", level: "info", msg: "phase", component: "reconciler", cluster: "local", sandboxId: "sbx-1", phase: "Running" }, "info"],
      [{ time: "2026-12-01T10:00:00.000Z", level: "error", msg: "reconcile failed", component: "reconciler", cluster: "local", sandboxId: "sbx-2", error: "boom\nsecond line" }, "error"],
    ]);
  });

  it("a line a trace source claims (by its fields) carries that trace's id; others and explicit ids are left alone", () => {
    const lines: string[] = [];
    configureLogs({ format: "json", write: (l) => lines.push(l), now: () => T });
    const traced = new Map([["sbx-1", "4bf92f3577b34da6a3ce929d0e0e4736"]]);
    const untrace = traceLogsBy((f) => (typeof f.sandboxId === "string" ? traced.get(f.sandboxId) : undefined));
    const log = logger("driver");
    log.warn("mount failed", { sandboxId: "sbx-1" });
    log.info("phase", { sandboxId: "sbx-2" });
    log.info("phase", { sandboxId: "sbx-1", traceId: "0af7651916cd43dd8448eb211c80319c" });
    untrace();
    log.info("after", { sandboxId: "sbx-1" });
    expect(lines.map((l) => JSON.parse(l).traceId)).toEqual(["4bf92f3577b34da6a3ce929d0e0e4736", undefined, "0af7651916cd43dd8448eb211c80319c", undefined]);
  });

  it("a field cannot overwrite the fixed keys", () => {
    const line = JSON.parse(formatLine("json", T, "warn", "link", "edge error", { msg: "forged", level: "debug", code: 4 }));
    expect(line).toEqual({ time: "2026-12-01T10:00:00.000Z", level: "warn", msg: "edge error", component: "link", code: 4 });
  });

  it("text: time, level, component, message, then key=value (quoted when needed)", () => {
    expect(formatLine("text", T, "info", "agent", "started", { driver: "local", note: "two words", port: 9 })).toBe('2026-12-01T10:00:00.000Z INFO  [agent] started driver=local note="two words" port=9');
  });

  it("--log-format takes json or text only", () => {
    expect(parseLogFormat("json")).toBe("json");
    expect(parseLogFormat(undefined)).toBeUndefined();
    expect(() => parseLogFormat("xml")).toThrow(/json or text/);
  });
});
