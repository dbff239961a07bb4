// Module state taken from the running process in a process started from a startup snapshot
// (controllers/runtime/snapshot.ts): a module body ran in the process that built the snapshot, and
// what it read there (here its pid; in http/metrics.ts the machine's CPU times, the baseline of
// the first /metrics) is taken again as the snapshot's process starts.
import { spawnSync } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { build } from "esbuild";
import { afterAll, describe, expect, it } from "vitest";

const ROOT = join(import.meta.dirname, "../..");
const dir = join(ROOT, ".cache", `snapshot-refresh-${process.pid}`);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("refreshAfterSnapshot", () => {
  it("gives a module the values of the process started from the snapshot, not the build's", async () => {
    mkdirSync(dir, { recursive: true });
    writeFileSync(
      join(dir, "entry.ts"),
      `import { startupSnapshot } from "node:v8";
import { refreshAfterSnapshot } from ${JSON.stringify(join(ROOT, "controllers/runtime/snapshot-refresh.ts"))};
let pid = process.pid;
const builtBy = process.pid;
refreshAfterSnapshot(() => void (pid = process.pid));
startupSnapshot.setDeserializeMainFunction(() => console.log(JSON.stringify({ pid, builtBy, self: process.pid })));
`,
    );
    await build({ entryPoints: [join(dir, "entry.ts")], bundle: true, platform: "node", format: "cjs", outfile: join(dir, "entry.cjs"), logLevel: "error" });
    const blob = join(dir, "entry.blob");
    const made = spawnSync(process.execPath, ["--snapshot-blob", blob, "--build-snapshot", join(dir, "entry.cjs")], { encoding: "utf8" });
    expect(made.status, made.stderr).toBe(0);
    const run = spawnSync(process.execPath, ["--snapshot-blob", blob], { encoding: "utf8" });
    expect(run.status, run.stderr).toBe(0);
    const got = JSON.parse(run.stdout) as { pid: number; builtBy: number; self: number };
    expect(got.builtBy).not.toBe(got.self);
    expect(got.pid).toBe(got.self);
  });
});
