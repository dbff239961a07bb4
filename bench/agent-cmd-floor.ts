// The floor of the agent's CPU per command (bench/e2e-steps.ts, e2e_steps.cmd_floor_cpu_ms): a
// bare node:http server, in a Node process of its own (the same Node), that takes the request
// the agent's ingress takes for `commands.run('echo hi')` (POST /process.Process/Start, the
// Connect envelope of the SDK's StartRequest), starts the same command in a sandbox of its own
// LocalDriver (same level, same template) through the same launcher (the driver's spawner: the
// wrapper entering the sandbox, its sandbox-pid report) and answers with the output as it comes.
// No signature check, no Connect, no protobuf, no logs, no process table: what is left is this
// launcher's path (an IPC hop to the Node spawner, its spawn, the pid report), which a runtime
// spawning directly could undercut. Its CPU per request is this process's and its spawner's (all threads).
import { fork, type ChildProcess } from "node:child_process";
import { createServer } from "node:http";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { LocalDriver } from "../controllers/drivers/local/local-driver.ts";
import type { DesiredSandbox, IsolationLevel } from "../controllers/drivers/driver.ts";
import { spawnerOf, threadsCpuMs } from "./stats.ts";

const USER = { name: "user", uid: 1000, gid: 1000, home: "/home/user", shell: "/bin/bash" };
const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const SDK_ENV = { PATH: DEFAULT_PATH, HOME: USER.home, USER: USER.name, LOGNAME: USER.name };
/** The SDK's first command (`commands.run("echo hi")`: a login shell as `user`), as the driver
 * runs it; bench/e2e.ts's warm path runs the same. */
export const SDK_FIRST_CMD = { cmd: "/bin/bash", args: ["-l", "-c", "echo hi"], cwd: USER.home, user: USER, env: SDK_ENV };
/** The SDK's StartRequest for commands.run('echo hi') as a Connect envelope (flags, length, JSON). */
const START_JSON = Buffer.from(JSON.stringify({ process: { cmd: SDK_FIRST_CMD.cmd, args: SDK_FIRST_CMD.args, envs: {} }, stdin: false }));
const BODY = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), START_JSON]);
BODY.writeUInt32BE(START_JSON.length, 1);

/** The server process, its sandbox made and its spawner started. */
export class CmdFloor {
  #child: ChildProcess;
  #url: string;
  private constructor(child: ChildProcess, url: string) {
    this.#child = child;
    this.#url = url;
  }

  static async start(dataDir: string, level: IsolationLevel): Promise<CmdFloor> {
    // Not SBX_SPAWNER_NODE_ARGS: a profile of this server's spawner beside the agent's spawner's
    // would read as a second "spawner" in bench/agent-profile.ts.
    const { SBX_SPAWNER_NODE_ARGS: _, ...env } = process.env;
    const child = fork(fileURLToPath(import.meta.url), ["serve", dataDir, level], { env, stdio: ["ignore", "inherit", "inherit", "ipc"] });
    const port = await new Promise<number>((ok, fail) => {
      child.once("message", (m: { port: number }) => ok(m.port));
      child.once("exit", (code) => fail(new Error(`the command floor's server exited (${code})`)));
    });
    const floor = new CmdFloor(child, `http://127.0.0.1:${port}/process.Process/Start`);
    // The first ones start its spawner and fill its connection pool.
    for (let i = 0; i < 5; i++) await floor.request();
    return floor;
  }

  /** The server's pid (its spawner: stats.ts spawnerOf). */
  get pid(): number {
    return this.#child.pid!;
  }

  async request(): Promise<void> {
    const res = await fetch(this.#url, { method: "POST", body: BODY, headers: { "content-type": "application/connect+json", "connect-protocol-version": "1", "e2b-sandbox-id": "floor", "e2b-sandbox-port": "49983" } });
    const out = await res.text();
    if (res.status !== 200 || out !== "hi\n") throw new Error(`the command floor answered ${res.status}: ${JSON.stringify(out.slice(0, 200))}`);
  }

  /** The server's and its spawner's CPU per request (ms) over `n` requests one at a time. */
  async round(n: number): Promise<{ server: number; spawner: number }> {
    const server = this.#child.pid!;
    const spawner = spawnerOf(server)!;
    const [s, p] = [threadsCpuMs(server), threadsCpuMs(spawner)];
    for (let i = 0; i < n; i++) await this.request();
    return { server: (threadsCpuMs(server) - s) / n, spawner: (threadsCpuMs(spawner) - p) / n };
  }

  async stop(): Promise<void> {
    const exited = new Promise((r) => this.#child.once("exit", r));
    this.#child.send("stop");
    await exited;
  }
}

async function serve(dataDir: string, level: IsolationLevel): Promise<void> {
  const driver = new LocalDriver({ dataDir, level, cgroupName: `kruise-bench-${process.pid}-cmdfloor` });
  const d: DesiredSandbox = { id: `bcf${process.pid}`, generation: 1, template: "base", state: "Running", pauseStrategy: "Freeze", resources: { cpuCount: 1, memoryMB: 512 }, allowInternetAccess: true };
  await driver.ensure(d);
  const view = driver.view(d.id);
  const server = createServer((req, res) => {
    const body: Buffer[] = [];
    req.on("data", (c: Buffer) => body.push(c));
    req.on("end", async () => {
      try {
        const start = JSON.parse(Buffer.concat(body).subarray(5).toString()) as { process: { cmd: string; args: string[] } };
        const p = await view.launcher!.spawnPipes(view.command({ cmd: start.process.cmd, args: start.process.args, cwd: USER.home, env: SDK_ENV, user: USER }), false);
        res.writeHead(200, { "content-type": "application/connect+json" });
        p.stdout.on("data", (c: Buffer) => res.write(c));
        p.stderr.resume();
        p.onExit(() => (p.stdout.readableEnded ? res.end() : p.stdout.once("end", () => res.end())));
      } catch (err) {
        res.writeHead(500).end(String(err));
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  process.on("message", async () => {
    server.close();
    await driver.destroy(d.id).catch(() => {});
    await driver.dispose();
    process.exit(0);
  });
  process.send!({ port: (server.address() as { port: number }).port });
}

if (import.meta.main && process.argv[2] === "serve") await serve(join(process.argv[3]!), process.argv[4] as IsolationLevel);
