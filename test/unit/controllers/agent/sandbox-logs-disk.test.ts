// The agent's sandbox logs on disk: what one SandboxLogs wrote, a new one (the restarted agent)
// reads back; writes are batched, and whatever a query served is on disk; the file stays bounded;
// a deleted sandbox's logs stay a while (bounded in time and count), then its file goes; a torn
// last line (a crash mid-write) is skipped; an id that is not a sandbox id never becomes a path.
import { appendFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ENDED_KEEP_MS, SandboxLogs } from "../../../../controllers/agent/sandbox-logs.ts";

const A = "aaaaaaaaaaaaaaaaaaaa";
const B = "bbbbbbbbbbbbbbbbbbbb";
const C = "cccccccccccccccccccc";
let dir: string;
const all = (logs: SandboxLogs, id: string) => logs.query(id, { limit: 1000, direction: "forward" });

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "sbx-logs-"));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe("SandboxLogs on disk", () => {
  it("a new instance on the same directory has the entries, in order, with their fields", () => {
    const before = new SandboxLogs({ perSandbox: 100, dir });
    before.append(A, "info", "process started", { pid: 7, cmd: "echo hi" }, 1000);
    before.append(A, "error", "process exited", { pid: 7, exitCode: 1 }, 2000);
    before.append(B, "info", "phase", { phase: "Running" }, 1500);
    before.flush();
    const after = new SandboxLogs({ perSandbox: 100, dir });
    expect(all(after, A)).toEqual(all(before, A));
    expect(all(after, A).map((e) => e.fields)).toEqual([{ pid: "7", cmd: "echo hi" }, { pid: "7", exitCode: "1" }]);
    expect(all(after, B).map((e) => e.message)).toEqual(["phase"]);
  });

  it("keeps each file under twice the bound and reads back only the newest entries", () => {
    const logs = new SandboxLogs({ perSandbox: 10, dir });
    for (let i = 0; i < 95; i++) {
      logs.append(A, "info", `line ${i}`, {}, i);
      if (i % 7 === 0) logs.flush();
    }
    logs.flush();
    const lines = readFileSync(join(dir, `${A}.jsonl`), "utf8").trim().split("\n");
    expect(lines.length).toBeLessThanOrEqual(20);
    const after = new SandboxLogs({ perSandbox: 10, dir });
    expect(all(after, A).map((e) => e.message)).toEqual(Array.from({ length: 10 }, (_, i) => `line ${85 + i}`));
  });

  it("batches writes: nothing is on disk until the flush, and a query flushes first", async () => {
    const logs = new SandboxLogs({ perSandbox: 10, dir, flushMs: 20 });
    logs.append(A, "info", "one", {}, 1);
    logs.append(A, "info", "two", {}, 2);
    expect(readdirSync(dir)).toEqual([]);
    expect(all(logs, A).map((e) => e.message)).toEqual(["one", "two"]);
    expect(all(new SandboxLogs({ perSandbox: 10, dir }), A).map((e) => e.message)).toEqual(["one", "two"]);
    logs.append(A, "info", "three", {}, 3);
    await new Promise((ok) => setTimeout(ok, 60));
    expect(all(new SandboxLogs({ perSandbox: 10, dir }), A).map((e) => e.message)).toEqual(["one", "two", "three"]);
  });

  it("keeps a deleted sandbox's logs for a while and for a bounded number of sandboxes", () => {
    let now = 1_000_000;
    const logs = new SandboxLogs({ perSandbox: 10, dir, endedKeepMs: 1000, endedKeepCount: 2, now: () => now });
    for (const id of [A, B, C]) logs.append(id, "info", `log of ${id[0]}`, {}, 1);
    logs.flush();
    logs.ended(A);
    expect(all(logs, A).map((e) => e.message)).toEqual(["log of a"]);
    now += 500;
    logs.ended(B);
    logs.ended(C); // a third ended sandbox: the oldest (A) goes
    expect(all(logs, A)).toEqual([]);
    expect(readdirSync(dir).sort()).toEqual([`${B}.jsonl`, `${C}.jsonl`]);
    expect(all(logs, B).map((e) => e.message)).toEqual(["log of b"]);
    now += 1001; // past the time bound
    expect(all(logs, B)).toEqual([]);
    expect(readdirSync(dir)).toEqual([]);
  });

  it("a restarted agent counts sandboxes no longer there as ended when their file was last written", () => {
    const logs = new SandboxLogs({ perSandbox: 10, dir });
    logs.append(A, "info", "a", {}, 1);
    logs.append(B, "info", "b", {}, 1);
    logs.flush();
    logs.drop(A);
    expect(readdirSync(dir)).toEqual([`${B}.jsonl`]);
    const written = statSync(join(dir, `${B}.jsonl`)).mtimeMs;
    const recent = new SandboxLogs({ perSandbox: 10, dir, now: () => written + 1000 });
    recent.retainOnly([]);
    expect(all(recent, B).map((e) => e.message)).toEqual(["b"]);
    const late = new SandboxLogs({ perSandbox: 10, dir, now: () => written + ENDED_KEEP_MS + 1 });
    late.retainOnly([]);
    expect(all(late, B)).toEqual([]);
    expect(readdirSync(dir)).toEqual([]);
  });

  it("skips a torn or foreign line and writes no file for an id that is not a sandbox id", () => {
    const logs = new SandboxLogs({ perSandbox: 10, dir });
    logs.append(A, "info", "whole", {}, 1);
    logs.flush();
    appendFileSync(join(dir, `${A}.jsonl`), '{"timestamp":2,"level":"info","mess');
    logs.append("../../etc/x", "info", "kept in memory only", {}, 1);
    expect(readdirSync(dir)).toEqual([`${A}.jsonl`]);
    expect(all(logs, "../../etc/x").map((e) => e.message)).toEqual(["kept in memory only"]);
    expect(all(new SandboxLogs({ perSandbox: 10, dir }), A).map((e) => e.message)).toEqual(["whole"]);
  });
});
