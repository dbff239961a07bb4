// Code contexts kept over a Stop pause outlive an agent restart while the sandbox is paused: the
// agent keeps them in its data directory as they are made. The agent is killed as soon as the pause
// is answered, which may be before it acted on it (the new agent then stops the sandbox). What survives is each context's id, language and cwd;
// its variables do not (the kernel process ended with the pause), and using one is the kernel's own
// error. This file runs its own system (not the shared one) because it restarts the agent. Real
// @e2b/code-interpreter SDK against the whole local system.
import { Sandbox } from "@e2b/code-interpreter";
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { startSystem, type System } from "../../scripts/lib/system.ts";

let sys: System;
let dataDir: string;
const opts = () => ({ apiKey: sys.apiKey, apiUrl: sys.apiUrl, sandboxUrl: sys.apiUrl, requestTimeoutMs: 60_000 });

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), "sbx-ci-restart-"));
  sys = await startSystem({ dataDir, baseReplicas: 0, codeInterpreterReplicas: 1 });
}, 300_000);
afterAll(async () => {
  await sys?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

it("contexts of a Stop-paused sandbox survive an agent restart: same ids, languages and cwd; variables are gone", { timeout: 300_000 }, async ({ onTestFailed }) => {
  // The agents' log goes with the data directory: keep it where a failure can be read.
  onTestFailed(() => copyFileSync(join(dataDir, "agent.log"), join(tmpdir(), "sbx-ci-restart-agent.log")));
  const sbx = await Sandbox.create(opts());
  try {
    const py = await sbx.createCodeContext({ cwd: "/tmp" });
    const js = await sbx.createCodeContext({ language: "js" });
    expect((await sbx.runCode("before = 'stop'", { context: py })).error).toBeUndefined();
    expect(await sbx.pause({ keepMemory: false })).toBe(true);

    await sys.stopAgent("SIGKILL");
    await sys.startAgent();

    // The edge answers 503 until the new agent is linked; resume once it is.
    const back = await expect
      .poll(() => Sandbox.connect(sbx.sandboxId, opts()).catch(() => undefined), { timeout: 120_000, interval: 500 })
      .toBeDefined()
      .then(() => Sandbox.connect(sbx.sandboxId, opts()));
    const listed = await back.listCodeContexts();
    expect(listed).toEqual(expect.arrayContaining([
      expect.objectContaining({ id: py.id, language: "python", cwd: "/tmp" }),
      expect.objectContaining({ id: js.id, language: "javascript" }),
    ]));
    const cwd = await back.runCode("import os; os.getcwd()", { context: py });
    expect(cwd.error).toBeUndefined();
    expect(cwd.text).toBe("'/tmp'");
    // The kernel's own answer for a variable from before the pause.
    const gone = await back.runCode("before", { context: py });
    expect(gone.error?.name).toBe("NameError");
    expect(gone.error?.value).toContain("'before' is not defined");
    expect((await back.runCode("1 + 2", { context: js })).text).toBe("3");
  } finally {
    await sbx.kill().catch(() => false);
  }
});
