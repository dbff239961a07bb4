// The spawner process: forks on the agent's behalf (see spawner.ts for why). It speaks Node's IPC
// channel with the agent, imports little beyond Node's own modules (node-pty only when a terminal
// is asked for), and exits when the agent goes away. Output never flows through this process: a
// child's pipes are connections the agent opened to this process's socket in advance (the pool),
// or, when the pool is empty, socket pairs passed back to the agent as file descriptors (Node's
// handle passing, one acknowledged message per pipe: two more round trips). Only terminal output
// is relayed, because node-pty keeps its master end here.
import type { ChildProcess } from "node:child_process";
import { closeSync, readFileSync } from "node:fs";
import { createServer, type Socket } from "node:net";
import { dirname } from "node:path";
import { closeInheritedFds } from "../../lib/inherited-fds.ts";
import { spawnHost, spawnPtyHere, type HandoverOptions, type LaunchedPty } from "../../runtime/process/launcher.ts";
import { CONNECTION_ID_BYTES, openStdioFile, stopReading, type SpawnerReply, type SpawnerRequest } from "./spawner-protocol.ts";

// Every process this one starts would inherit them: whatever embeds the driver (a benchmark, a
// test) may not have closed what it inherited, as the agent does.
closeInheritedFds();

// A send that fails means the agent is gone; 'disconnect' ends this process.
const send = (m: SpawnerReply, handle?: Socket): void => void process.send!(m, handle, {}, () => {});
const terms = new Map<number, LaunchedPty>();
/** Connections from the agent, by the id each one sent first, not yet given to a child. */
const pool = new Map<number, Socket>();
const socketPath = process.argv[2]!;
// Handover files (a command's environment, see launcher.ts) go beside the socket: a private
// directory the agent made and removes. enter.pl checks its parent against KRUISE_PARENT_PID, so a
// command whose spawner died while it started does not live on unowned.
const handover: HandoverOptions = { envDir: () => dirname(socketPath), env: { KRUISE_PARENT_PID: String(process.pid) } };

function takePooled(stdio: Extract<SpawnerRequest, { t: "spawn" }>["stdio"]): Map<number, [number, Socket]> | undefined {
  const want = stdio.flatMap((s, n) => (s === "pipe" ? [n] : []));
  if (want.length === 0 || pool.size < want.length) return undefined;
  const out = new Map<number, [number, Socket]>();
  const ids = pool.keys();
  for (const n of want) {
    const id = ids.next().value as number;
    out.set(n, [id, pool.get(id)!]);
  }
  for (const [, [id]] of out) pool.delete(id);
  return out;
}

function doSpawn(m: Extract<SpawnerRequest, { t: "spawn" }>): void {
  const files: number[] = [];
  const pooled = takePooled(m.stdio);
  let child: ChildProcess;
  try {
    const stdio = m.stdio.map((s, n) => {
      const conn = pooled?.get(n);
      if (conn) return conn[1];
      if (typeof s === "string") return s;
      if ("same" in s) return pooled?.get(s.same)?.[1] ?? "ignore";
      const fd = openStdioFile(s);
      files.push(fd);
      return fd;
    });
    child = spawnHost(m, { detached: m.detached, stdio, ...handover });
  } catch (err) {
    for (const [, [, s]] of pooled ?? []) s.destroy();
    return send({ t: "error", id: m.id, message: (err as Error).message });
  } finally {
    for (const fd of files) closeSync(fd);
  }
  // The child has its own copies of pooled connections now.
  for (const [, [, s]] of pooled ?? []) s.destroy();
  if (child.pid === undefined) {
    child.once("error", (err) => send({ t: "error", id: m.id, message: err.message }));
    return;
  }
  if (pooled) {
    send({ t: "spawned", id: m.id, pid: child.pid, pipes: [], pooled: Object.fromEntries([...pooled].map(([n, [id]]) => [n, id])) });
  } else {
    // Before the event loop runs again: bytes read here would be lost with the handle we pass on.
    const pipes = child.stdio.map((s, n) => ({ s: s as Socket | null, n })).filter((p) => p.s && m.stdio[p.n] === "pipe");
    for (const { s, n } of pipes) if (n > 0) stopReading(s!);
    // Node destroys a child's stdin when it exits, which may be before that handle is sent.
    (child as { stdin: unknown }).stdin = null;
    send({ t: "spawned", id: m.id, pid: child.pid, pipes: pipes.map((p) => p.n) });
    // Sent one by one (Node passes one handle per message); each is closed here once delivered.
    for (const { s, n } of pipes) send({ t: "fd", id: m.id, n }, s!);
  }
  child.once("exit", (code, signal) => send({ t: "exit", id: m.id, code, signal }));
}

async function doPty(m: Extract<SpawnerRequest, { t: "pty" }>): Promise<void> {
  let t: LaunchedPty;
  try {
    // enter.pl closes what it inherited and switches user itself: no closer before it.
    t = await spawnPtyHere(m, { cols: m.cols, rows: m.rows }, { ...handover, closesInherited: true });
  } catch (err) {
    return send({ t: "error", id: m.id, message: (err as Error).message });
  }
  terms.set(m.id, t);
  send({ t: "spawned", id: m.id, pid: t.pid, pipes: [] });
  t.onData((data) => send({ t: "data", id: m.id, data }));
  t.onExit(({ code, signal }) => {
    terms.delete(m.id);
    send({ t: "exit", id: m.id, code, signal });
  });
}

process.on("message", (m: SpawnerRequest) => {
  switch (m.t) {
    case "spawn":
      return doSpawn(m);
    case "pty":
      return void doPty(m);
    case "write":
      return terms.get(m.id)?.write(Buffer.from(m.data));
    case "pause":
      return terms.get(m.id)?.pause?.();
    case "resume":
      return terms.get(m.id)?.resume?.();
    case "resize":
      try {
        terms.get(m.id)?.resize(m.cols, m.rows);
      } catch {
        // node-pty throws for a terminal that just exited
      }
      return;
  }
});
// The agent is gone: leave. Commands started here die with us (enter.pl's parent-death signal);
// holders were started in their own session without one and keep their sandboxes running.
process.on("disconnect", () => process.exit(0));
// Seen once in a full test run: spawners whose agent was gone (their IPC fd closed) never exited.
// Node holds 'disconnect' back while a message is half read, which may be how; whatever the cause,
// also leave once we have been reparented.
const agentPid = process.ppid;
const currentParent = () => Number(readFileSync("/proc/self/stat", "utf8").split(") ")[1]!.split(" ")[1]);
setInterval(() => currentParent() !== agentPid && process.exit(0), 500).unref();
// Connections the agent opens in advance; each says its id first, then waits for a child.
const server = createServer((conn) => {
  let head = Buffer.alloc(0);
  const onData = (d: Buffer) => {
    head = Buffer.concat([head, d]);
    if (head.length < CONNECTION_ID_BYTES) return;
    conn.off("data", onData);
    stopReading(conn);
    const id = head.readUInt32BE(0);
    pool.set(id, conn);
    conn.once("close", () => pool.get(id) === conn && pool.delete(id));
  };
  conn.on("data", onData);
  conn.on("error", () => {});
});
// A socket that cannot be made (the driver was disposed and its private directory removed while
// this process started) means nobody will use this spawner: leave quietly, not with a crash trace.
server.once("error", (err) => {
  process.stderr.write(`spawner: cannot listen on ${socketPath} (${(err as NodeJS.ErrnoException).code}); exiting\n`);
  process.exit(1);
});
server.listen(socketPath, () => send({ t: "ready", pid: process.pid }));
