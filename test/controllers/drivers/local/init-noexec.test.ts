// The sandbox's init (sandbox-init.ts) is exec'd from the driver's data dir. On a data dir mounted
// noexec (a hardened /var, a tmpfs) the exec is refused, and every sandbox's start failed with its
// own "holder exited early". The driver now looks once, at its start (sandbox-init-check.ts): it
// says why in its notes and at warn in the agent's log, names it in the isolation the agent
// reports, and starts holders of the shape before the init (bwrap's own pid 1 over
// `sleep infinity`), whose sandboxes run. A real noexec mount: a tmpfs as the data dir (its size a
// bound only: the sandbox's disk image is sparse, and the driver wants its size free).
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { isolationOf } from "../../../../controllers/agent/agent.ts";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { configureLogs } from "../../../../controllers/lib/log.ts";
import { desiredSandbox, shIn } from "./fixture.ts";

const base = mkdtempSync(join(tmpdir(), "local-init-noexec-"));
const dataDir = join(base, "data");
mkdirSync(dataDir);
execFileSync("mount", ["-t", "tmpfs", "-o", "noexec,nosuid,nodev,size=4g,mode=0711", "tmpfs", dataDir]);
// The agent's logs as `--log-format json` writes them (main.ts sets the format before any driver).
const lines: string[] = [];
configureLogs({ format: "json", write: (line) => void lines.push(line) });
const driver = new LocalDriver({ dataDir, cgroupName: `kruise-test-${process.pid}-noexec` });
const logged = lines.map((l) => JSON.parse(l) as { level: string; msg: string; component: string });

afterAll(async () => {
  for (const s of await driver.list()) await driver.destroy(s.id);
  await driver.dispose();
  execFileSync("umount", [dataDir]);
  rmSync(base, { recursive: true, force: true });
});

describe("a data dir mounted noexec", () => {
  it("is the mount the case means: noexec, and the driver runs sandboxes with namespaces here", () => {
    const opts = readFileSync("/proc/self/mountinfo", "utf8").split("\n").find((l) => l.split(" ")[4] === dataDir)?.split(" ")[5];
    expect(opts?.split(",")).toContain("noexec");
    expect(driver.capabilities.level).not.toBe("process");
  });

  it("is said once at the driver's start, with the reason, as a note and a warning", () => {
    const notes = driver.capabilities.notes.filter((n) => n.startsWith("no sandbox init"));
    expect(notes).toHaveLength(1);
    expect(notes[0]).toContain(`${dataDir}/sandbox-init cannot be executed (Permission denied)`);
    expect(notes[0]).toMatch(/mounted noexec/);
    // A warning in the agent's structured log (JSON here), not a plain console line.
    expect(logged.filter((l) => l.msg.includes("no sandbox init"))).toEqual([{ time: expect.any(String), level: "warn", component: "local", msg: notes[0] }]);
  });

  it("is named in the isolation the agent reports to the edge", () => {
    expect(driver.capabilities.sandboxInit).toBe(false);
    expect(isolationOf(driver.capabilities)).toMatch(/^bwrap[^,]*, disk quota, no sandbox init \(pid 1 killable\)$/);
  });

  it("does not fail a sandbox's start: its commands run, under bwrap's own pid 1", async () => {
    const d = desiredSandbox("nx");
    const obs = await driver.ensure(d);
    expect(obs.phase).toBe("Running");
    expect((await shIn(driver, d.id, "echo up; cat /proc/1/comm")).stdout).toBe("up\nbwrap\n");
  });
});
