// The agent's structured logs as `npm start` writes them (stdout to a file, so JSON): every line an
// object with time, level, msg and component, and a sandbox's phase changes findable by its id.
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
});
