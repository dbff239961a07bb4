// `npm start` itself (scripts/start.ts) as an operator runs it: every part it started killed with
// kill -9 at once, the launcher reports each and brings it back, the system serves the SDK again,
// and Ctrl-C (SIGINT) still stops everything and ends the launcher.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, resolve } from "node:path";
import { Sandbox } from "e2b";
import { afterAll, describe, expect, it } from "vitest";
import { freePort } from "../../scripts/lib/sqld.ts";
import { sleep } from "./sdk.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const dataDir = mkdtempSync(join(tmpdir(), "sbx-launcher-"));
let launcher: ChildProcess | undefined;
let output = "";

afterAll(async () => {
  if (launcher && launcher.exitCode === null && launcher.signalCode === null) {
    const exited = new Promise((ok) => launcher!.once("exit", ok));
    launcher.kill("SIGINT");
    await exited;
  }
  rmSync(dataDir, { recursive: true, force: true });
});

async function until(what: string, check: () => boolean, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`${what} not seen; launcher output:\n${output}`);
    await sleep(100);
  }
}

/** The launcher's children: sqld, workerd and the agent (a node running controllers/agent/main.ts). */
function children(pid: number): { sqld?: number; workerd?: number; agent?: number } {
  const found: { sqld?: number; workerd?: number; agent?: number } = {};
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    let cmdline: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8");
    } catch {
      continue; // gone meanwhile
    }
    const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
    if (ppid !== pid) continue;
    // By the program and the script, not a substring of the whole line: a checkout whose path
    // contains "sqld" or "workerd" would otherwise name every child after it.
    const argv = cmdline.split("\0");
    const program = basename(argv[0] ?? "");
    if (argv.some((a) => a.endsWith("controllers/agent/main.ts"))) found.agent = Number(entry);
    else if (program === "sqld") found.sqld = Number(entry);
    else if (program === "workerd") found.workerd = Number(entry);
  }
  return found;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe("npm start", () => {
  it("kill -9 of sqld, workerd and the agent at once: each is reported and restarted, the SDK works again, and Ctrl-C stops everything", async () => {
    const port = await freePort();
    launcher = spawn(join(ROOT, "node_modules/.bin/node"), ["scripts/start.ts"], {
      cwd: ROOT,
      env: { ...process.env, SBX_DATA_DIR: dataDir, PORT: String(port), BASE_POOL: "0" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    launcher.stdout!.on("data", (d: Buffer) => (output += d.toString()));
    launcher.stderr!.on("data", (d: Buffer) => (output += d.toString()));
    await until("Ready", () => output.includes("Ready."), 180_000);
    const apiKey = /export E2B_API_KEY=(\S+)/.exec(output)![1]!;
    const opts = { apiKey, apiUrl: `http://127.0.0.1:${port}`, sandboxUrl: `http://127.0.0.1:${port}`, requestTimeoutMs: 30_000 };

    const first = children(launcher.pid!);
    expect(Object.keys(first).sort()).toEqual(["agent", "sqld", "workerd"]);
    for (const pid of Object.values(first)) process.kill(pid!, "SIGKILL");

    for (const name of ["sqld", "workerd", "agent"]) {
      await until(`${name} restart`, () => output.includes(`[supervisor] ${name} exited (killed by SIGKILL); restarting in`), 30_000);
      await until(`${name} back`, () => output.includes(`[supervisor] ${name} is running again`), 90_000);
    }
    const again = children(launcher.pid!);
    expect(Object.keys(again).sort()).toEqual(["agent", "sqld", "workerd"]);
    for (const pid of Object.values(first)) expect(alive(pid!)).toBe(false);

    // Usable without a person: create and a command through the gateway.
    const deadline = Date.now() + 60_000;
    let sbx: Sandbox | undefined;
    while (!sbx) {
      sbx = await Sandbox.create(opts).catch((err: unknown) => {
        if (Date.now() > deadline) throw err;
        return undefined;
      });
      if (!sbx) await sleep(500);
    }
    expect((await sbx.commands.run("echo healed")).stdout).toBe("healed\n");
    await sbx.kill();

    const exited = new Promise<number | null>((ok) => launcher!.once("exit", (code) => ok(code)));
    launcher.kill("SIGINT");
    expect(await exited).toBe(0);
    for (const pid of Object.values(again)) expect(alive(pid!)).toBe(false);
    // No disk of the installation stays mounted: stopped sandboxes' disks and the spares are released.
    expect(readFileSync("/proc/mounts", "utf8")).not.toContain(dataDir);
  }, 360_000);
});
