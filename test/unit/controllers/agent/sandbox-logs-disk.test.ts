// The agent's sandbox logs on disk: what one SandboxLogs wrote, a new one (the restarted agent)
// reads back; the file stays bounded; a dropped sandbox's file goes; a torn last line (a crash
// mid-write) is skipped; an id that is not a sandbox id never becomes a path.
import { appendFileSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { SandboxLogs } from "../../../../controllers/agent/sandbox-logs.ts";

const A = "aaaaaaaaaaaaaaaaaaaa";
const B = "bbbbbbbbbbbbbbbbbbbb";
let dir: string;
const all = (logs: SandboxLogs, id: string) => logs.query(id, { limit: 1000, direction: "forward" });

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "sbx-logs-"));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe("SandboxLogs on disk", () => {
  it("a new instance on the same directory has the entries, in order, with their fields", () => {
    const before = new SandboxLogs(100, dir);
    before.append(A, "info", "process started", { pid: 7, cmd: "echo hi" }, 1000);
    before.append(A, "error", "process exited", { pid: 7, exitCode: 1 }, 2000);
    before.append(B, "info", "phase", { phase: "Running" }, 1500);
    const after = new SandboxLogs(100, dir);
    expect(all(after, A)).toEqual(all(before, A));
    expect(all(after, A).map((e) => e.fields)).toEqual([{ pid: "7", cmd: "echo hi" }, { pid: "7", exitCode: "1" }]);
    expect(all(after, B).map((e) => e.message)).toEqual(["phase"]);
  });

  it("keeps each file under twice the bound and reads back only the newest entries", () => {
    const logs = new SandboxLogs(10, dir);
    for (let i = 0; i < 95; i++) logs.append(A, "info", `line ${i}`, {}, i);
    const lines = readFileSync(join(dir, `${A}.jsonl`), "utf8").trim().split("\n");
    expect(lines.length).toBeLessThanOrEqual(20);
    const after = new SandboxLogs(10, dir);
    expect(all(after, A).map((e) => e.message)).toEqual(Array.from({ length: 10 }, (_, i) => `line ${85 + i}`));
  });

  it("drop and retainOnly remove the files of sandboxes that are gone", () => {
    const logs = new SandboxLogs(10, dir);
    logs.append(A, "info", "a", {}, 1);
    logs.append(B, "info", "b", {}, 1);
    logs.drop(A);
    expect(readdirSync(dir)).toEqual([`${B}.jsonl`]);
    const after = new SandboxLogs(10, dir);
    after.retainOnly([]);
    expect(readdirSync(dir)).toEqual([]);
    expect(all(new SandboxLogs(10, dir), B)).toEqual([]);
  });

  it("skips a torn or foreign line and writes no file for an id that is not a sandbox id", () => {
    const logs = new SandboxLogs(10, dir);
    logs.append(A, "info", "whole", {}, 1);
    appendFileSync(join(dir, `${A}.jsonl`), '{"timestamp":2,"level":"info","mess');
    logs.append("../../etc/x", "info", "kept in memory only", {}, 1);
    expect(readdirSync(dir)).toEqual([`${A}.jsonl`]);
    expect(all(logs, "../../etc/x").map((e) => e.message)).toEqual(["kept in memory only"]);
    expect(all(new SandboxLogs(10, dir), A).map((e) => e.message)).toEqual(["whole"]);
  });
});
