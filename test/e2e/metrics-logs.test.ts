// The agent's structured logs as `npm start` writes them (stdout to a file, so JSON): every line an
// object with time, level, msg and component, and a sandbox's phase changes findable by its id;
// with tracing off (as here), a line for work a request caused carries that request's id.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { describe, expect, it } from "vitest";
import { inject } from "vitest";
import { waitFor } from "../support/wait-for.ts";
import { e2b } from "./sdk.ts";

interface Line {
  time: string;
  level: string;
  msg: string;
  component: string;
  [k: string]: unknown;
}

function agentLog(): Line[] {
  const text = readFileSync(join(inject("e2b").dataDir, "agent.log"), "utf8");
  // Only the agent's own lines: tools it runs (bubblewrap, the spawner) may write plain text.
  return text
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as Line);
}

describe("agent logs", () => {
  it("are JSON lines, and a sandbox's life is found by its id", async () => {
    const sbx = await Sandbox.create(e2b());
    await sbx.kill();
    await waitFor(() => agentLog().some((l) => l.sandboxId === sbx.sandboxId && l.phase === "Deleted"));
    const lines = agentLog();
    for (const l of lines) {
      expect(Number.isNaN(Date.parse(l.time))).toBe(false);
      expect(["debug", "info", "warn", "error"]).toContain(l.level);
      expect(typeof l.msg).toBe("string");
      expect(typeof l.component).toBe("string");
    }
    expect(lines.find((l) => l.msg === "connected to the edge")).toMatchObject({ level: "info", component: "agent" });
    const mine = lines.filter((l) => l.sandboxId === sbx.sandboxId).map((l) => l.phase);
    expect(mine).toContain("Running");
    expect(mine.at(-1)).toBe("Deleted");
  });

  it("with tracing off, a line for work a request caused carries the request's id (X-Request-Id): the create's claim, the pause, the kill", async () => {
    const { apiUrl, apiKey } = inject("e2b");
    const call = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(apiUrl + path, { method, headers: { "x-api-key": apiKey, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
      const text = await res.text();
      expect(res.status, text).toBeLessThan(300);
      return { requestId: res.headers.get("x-request-id") ?? "", body: text ? (JSON.parse(text) as { sandboxID: string }) : null };
    };
    const created = await call("POST", "/sandboxes", { templateID: "base", timeout: 300 });
    const id = created.body!.sandboxID;
    const paused = await call("POST", `/sandboxes/${id}/pause`);
    const killed = await call("DELETE", `/sandboxes/${id}`);
    for (const r of [created, paused, killed]) expect(r.requestId).toMatch(/^[0-9a-f]{32}$/);
    const lines = await waitFor(() => {
      const mine = agentLog().filter((l) => l.sandboxId === id);
      return mine.some((l) => l.phase === "Deleted") ? mine : undefined;
    });
    // The create claimed a warm member of the base pool (a "claimed" line), or made one (its phases).
    const byCreate = lines.filter((l) => l.msg === "claimed" || (l.msg === "phase" && l.phase === "Running" && l.from !== "Paused"));
    expect(byCreate.length, JSON.stringify(lines)).toBeGreaterThan(0);
    expect(byCreate.at(-1)!.traceId, JSON.stringify(lines)).toBe(created.requestId);
    // The pause is answered before the agent has paused, so the kill's intent can arrive while the
    // pause's pass runs: that pass's lines still carry the pause's id (CI runs 3 and 6 saw the kill's).
    expect(lines.filter((l) => l.phase === "Paused").map((l) => l.traceId), JSON.stringify(lines)).toEqual([paused.requestId]);
    expect(lines.filter((l) => l.phase === "Deleted").map((l) => l.traceId), JSON.stringify(lines)).toEqual([killed.requestId]);
  });
});
