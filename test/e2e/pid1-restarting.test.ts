// What a client sees while a sandbox's pid 1 starts again (the host kills it, as the OOM killer
// may: root inside cannot end it, pid1-init.test.ts): restarted at once the first time, after a backoff
// when it ends again soon after a restart, reported not ready meanwhile. Through the real e2b
// SDK during that wait: the admin API shows Ready False, reason Pid1Restarting; E2B's detail says
// running and isRunning() is true (the gateway holds /health until the sandbox is back, instead of
// the runtime's 502 that reads as a killed sandbox); a command sent meanwhile waits and runs in
// the restarted sandbox, its files kept. Bounded waits only: the kill is repeated (up to 5 times)
// until the edge is seen in that state, as the first restart is prompt and a wait is short.
import { Sandbox } from "e2b";
import { join } from "node:path";
import { afterAll, describe, expect, inject, it } from "vitest";
import { layoutFor } from "../../controllers/drivers/local/layout.ts";
import { readRecord, type SandboxRecord } from "../../controllers/drivers/local/records.ts";
import { waitFor } from "../support/wait-for.ts";
import { admin, e2b } from "./sdk.ts";

const made: Sandbox[] = [];
afterAll(async () => {
  for (const s of made) await s.kill().catch(() => false);
});

function recordOf(id: string): SandboxRecord {
  return readRecord(layoutFor(join(inject("e2b").dataDir, "agent/local"), id).record)!;
}

type Condition = { type: string; status: string; reason: string; message?: string };
const readyOf = async (id: string): Promise<Condition | undefined> => ((await admin(`/admin/sandboxes/${id}`)).conditions as Condition[]).find((c) => c.type === "Ready");
const failed = (err: unknown) => `failed: ${(err as Error)?.message ?? String(err)}`;

describe("a sandbox whose pid 1 starts again", () => {
  it("is not ready in the admin API and running to E2B meanwhile; a command sent then runs once it is back, its files kept", async () => {
    const sbx = await Sandbox.create(e2b());
    made.push(sbx);
    const id = sbx.sandboxId;
    // At `process` level the sandbox has no pid 1 of its own.
    expect(recordOf(id).level).not.toBe("process");
    await sbx.files.write("/tmp/before", "kept");

    let during: { ready: Condition; seen: string[] } | undefined;
    for (let kill = 1; kill <= 5 && !during; kill++) {
      const before = recordOf(id).nsInit!;
      process.kill(before.pid, "SIGKILL");
      const outcome = await waitFor(
        async () => {
          const ready = await readyOf(id);
          if (ready?.reason === "Pid1Restarting") {
            // What a client sees now, each answer or failure kept as it came.
            const seen = await Promise.all([
              Sandbox.getInfo(id, e2b()).then((i) => i.state, failed),
              sbx.isRunning().then(String, failed),
              sbx.commands.run("cat /tmp/before").then((r) => r.stdout, failed),
            ]);
            return { ready, seen };
          }
          const now = recordOf(id).nsInit;
          if (!now || (now.pid === before.pid && now.start === before.start) || ready?.status !== "True") return false;
          // Restarted without being seen waiting (a prompt restart): once a command runs, kill again.
          return (await sbx.commands.run("echo alive").then((r) => r.stdout, () => "")) === "alive\n" && "restarted";
        },
        { what: `the restart after kill ${kill}`, timeoutMs: 90_000, intervalMs: 50 },
      );
      if (outcome !== "restarted") during = outcome;
    }
    expect(during, "never seen restarting (Ready False Pid1Restarting) in 5 kills").toBeDefined();
    expect(during!.ready).toMatchObject({ status: "False", reason: "Pid1Restarting", message: expect.stringContaining("pid 1") });
    expect(during!.seen).toEqual(["running", "true", "kept"]);

    // Back: ready, and commands run in a new pid 1 (the files kept).
    await waitFor(async () => (await readyOf(id))?.status === "True", { what: "Ready True again", timeoutMs: 90_000, intervalMs: 200 });
    expect((await sbx.commands.run("cat /tmp/before")).stdout).toBe("kept");
    expect(await sbx.isRunning()).toBe(true);
  }, 300_000);
});
