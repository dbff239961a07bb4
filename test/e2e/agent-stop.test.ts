// An agent stopped with `--on-exit destroy` (how the tests and a throwaway `npm start` run it)
// destroys every sandbox before it exits: nothing of them stays mounted or running on the host.
// CI run 11-2: with the port relay idle, the stop's last relay command (a destroy's `unveth`) left
// the agent with no work the event loop counted, so it exited silently mid-stop, and every e2e
// system's teardown then failed on a still-mounted sandbox disk.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { afterAll, describe, expect, it } from "vitest";
import { startSystem, type System } from "../../scripts/lib/system.ts";

let sys: System | undefined;
const dataDir = mkdtempSync(join(tmpdir(), "sbx-agent-stop-"));
afterAll(async () => {
  await sys?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

describe("an agent's stop", () => {
  it("destroys its sandboxes, one with internet access included: no mount or process of theirs is left", async () => {
    sys = await startSystem({ dataDir, onExit: "destroy", baseReplicas: 1 });
    const sbx = await Sandbox.create({ apiUrl: sys.apiUrl, apiKey: sys.apiKey, sandboxUrl: sys.apiUrl, requestTimeoutMs: 60_000 });
    expect((await sbx.commands.run("echo up")).stdout).toBe("up\n");
    const mounts = () => readFileSync("/proc/self/mountinfo", "utf8").split("\n").filter((l) => l.includes(dataDir));
    expect(mounts().length).toBeGreaterThan(0);
    await sys.stop();
    sys = undefined;
    expect(mounts()).toEqual([]);
    expect(readFileSync(join(dataDir, "agent.log"), "utf8")).toMatch(/"msg":"destroyed (\d+) of \1 sandboxes/);
  });
});
