// The files API of a local sandbox runs in the agent as the host's root. A process inside swaps a
// directory for a link to a host directory in a tight loop (renameat2 RENAME_EXCHANGE: the name
// is always one or the other) while the e2b SDK writes, makes directories, removes, moves, lists,
// reads and stats through it: the link is a sandbox path to the runtime, but a host path to the
// kernel, so any operation that hands the kernel a path string after resolving it can be sent to
// the host (pinned-path.ts). Nothing outside the sandbox may be created, read, removed or listed.
// A process start checks its cwd the same way, and so does a code context's (POST /contexts
// {cwd}): starting or not must not tell whether a host directory exists.
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LocalDriver } from "../../../../controllers/drivers/local/local-driver.ts";
import { createRuntime, type Runtime } from "../../../../controllers/runtime/runtime.ts";
import { sandboxAt } from "../../../runtime/support/pod-runtime.ts";
import { desiredSandbox } from "./fixture.ts";

const dataDir = mkdtempSync(join(tmpdir(), "local-link-race-"));
const driver = new LocalDriver({ dataDir, cgroupName: `kruise-test-${process.pid}-race` });
// The link's target: a host directory no sandbox path reaches.
const hostDir = mkdtempSync("/tmp/sbx-race-host-");
const HOST_FILES = ["secret", "victim-rm", "victim-mv"];
const SECRET = "host-only-secret\n";
const TOKEN = "race-token";
const ROUNDS = 60;

let runtime: Runtime;
let sbx: Sandbox;
let closeApi = () => {};
let interpreter: Server;
let interpreterUrl: string;
const id = desiredSandbox("race").id;

// Swaps `d` (a directory) and `x` (a link to the host directory) for as long as it runs.
const SWAPPER = `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
os.makedirs('/home/user/w/d', exist_ok=True)
os.chdir('/home/user/w')
if not os.path.lexists('x'): os.symlink(${JSON.stringify(hostDir)}, 'x')
open('/home/user/w/ready', 'w').close()
while True: libc.renameat2(-100, b'd', -100, b'x', 2)
`;

beforeAll(async () => {
  for (const f of HOST_FILES) writeFileSync(join(hostDir, f), SECRET);
  mkdirSync(join(hostDir, "keep"));
  chmodSync(hostDir, 0o755);
  await driver.ensure({ ...desiredSandbox("race"), id });
  runtime = createRuntime();
  runtime.addSandbox(id, driver.view(id), { accessToken: TOKEN, defaultUser: "user", defaultWorkdir: "/home/user" });
  const server = await runtime.listen({ port: 0, host: "127.0.0.1" });
  const bound = await sandboxAt(`http://127.0.0.1:${(server.address() as { port: number }).port}`, id, TOKEN);
  sbx = bound.sbx;
  closeApi = bound.close;
  interpreter = createServer(runtime.interpreter);
  await new Promise<void>((r) => interpreter.listen(0, "127.0.0.1", r));
  interpreterUrl = `http://127.0.0.1:${(interpreter.address() as { port: number }).port}`;
});

afterAll(async () => {
  closeApi();
  interpreter?.close();
  await runtime?.close();
  await driver.destroy(id).catch(() => {});
  await driver.dispose();
  rmSync(dataDir, { recursive: true, force: true });
  rmSync(hostDir, { recursive: true, force: true });
});

/** Each failure is expected (the name is half the time a link the runtime refuses to follow). */
async function attempt<T>(op: () => Promise<T>): Promise<T | undefined> {
  return op().catch(() => undefined);
}

describe("the files API under a directory swapped for a link to the host", { timeout: 240_000 }, () => {
  it("never creates, reads, lists, stats, removes or moves anything outside the sandbox, nor starts a process in a host directory", async () => {
    await sbx.files.write("/home/user/swap.py", SWAPPER);
    const swapper = await sbx.commands.run("python3 /home/user/swap.py", { background: true });
    let ready = false;
    for (let i = 0; i < 100 && !ready; i++) {
      ready = await sbx.files.exists("/home/user/w/ready");
      if (!ready) await new Promise((r) => setTimeout(r, 100));
    }
    expect(ready, swapper.stderr).toBe(true);
    const base = "/home/user/w/d";
    const seen = { read: 0, listed: 0, stat: 0, cwd: 0, contextCwd: 0 };
    try {
      for (let i = 0; i < ROUNDS; i++) {
        await Promise.all([
          attempt(() => sbx.files.write(`${base}/w${i}`, "tenant bytes")),
          attempt(() => sbx.files.write(`${base}/sub${i}/w`, "tenant bytes")),
          attempt(() => sbx.files.makeDir(`${base}/m${i}`)),
          attempt(() => sbx.files.remove(`${base}/victim-rm`)),
          attempt(() => sbx.files.rename(`${base}/victim-mv`, `/home/user/w/moved${i}`)),
          attempt(() => sbx.files.remove(`${base}/keep`)),
          attempt(async () => {
            if ((await sbx.files.read(`${base}/secret`)) === SECRET) seen.read++;
          }),
          attempt(async () => {
            if ((await sbx.files.list(base)).some((e) => HOST_FILES.includes(e.name))) seen.listed++;
          }),
          attempt(async () => {
            if ((await sbx.files.getInfo(`${base}/secret`)).size === SECRET.length) seen.stat++;
          }),
          // `keep` is a directory of the host's only: every start is refused for its cwd.
          sbx.commands.run("true", { cwd: `${base}/keep` }).then(
            () => seen.cwd++,
            (err: Error) => !/cwd '.*' does not exist or is not a directory/.test(err.message) && seen.cwd++,
          ),
          // A code context in it likewise: every answer is the 400 of a missing directory.
          fetch(`${interpreterUrl}/contexts`, { method: "POST", headers: { "content-type": "application/json", "e2b-sandbox-id": id }, body: JSON.stringify({ language: "bash", cwd: `${base}/keep` }) }).then(
            async (res) => !(res.status === 400 && /cwd '.*' does not exist or is not a directory/.test(await res.text())) && seen.contextCwd++,
          ),
        ]);
      }
      // Still swapping at the end (a swapper that died early would make this test prove nothing).
      expect(swapper.exitCode, swapper.stderr).toBeUndefined();
    } finally {
      await swapper.kill();
    }
    // The host directory is as the test made it (nothing created, removed or moved away), and
    // nothing of it was read, listed or statted through the sandbox's path.
    const host = { entries: readdirSync(hostDir).sort(), contents: HOST_FILES.map((f) => existsSync(join(hostDir, f)) && readFileSync(join(hostDir, f), "utf8")) };
    expect({ host, seen }).toEqual({ host: { entries: [...HOST_FILES, "keep"].sort(), contents: HOST_FILES.map(() => SECRET) }, seen: { read: 0, listed: 0, stat: 0, cwd: 0, contextCwd: 0 } });
    // The API still works on the same names once the swapping stops.
    const settled = (await sbx.files.list("/home/user/w")).map((e) => e.name);
    expect(settled).toContain("d");
    await sbx.files.write("/home/user/w/after/x", "ok");
    expect(await sbx.files.read("/home/user/w/after/x")).toBe("ok");
  });
});
