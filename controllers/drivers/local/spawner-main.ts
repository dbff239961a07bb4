// The spawner process: forks on the agent's behalf (see spawner.ts for why). It speaks Node's IPC
// channel with the agent, imports nothing but Node's own modules (node-pty only when a terminal is
// asked for), and exits when the agent goes away. Pipes go back to the agent as file descriptors
// (SCM_RIGHTS under Node's handle passing), so output never flows through this process; only
// terminal output is relayed, because node-pty keeps its master end here.
import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import type { Socket } from "node:net";
import type { SpawnerReply, SpawnerRequest } from "./spawner-protocol.ts";

interface PtyTerm {
  pid: number;
  write(data: Buffer): void;
  resize(cols: number, rows: number): void;
}

// A send that fails means the agent is gone; 'disconnect' ends this process.
const send = (m: SpawnerReply, handle?: Socket): void => void process.send!(m, handle, {}, () => {});
const terms = new Map<number, PtyTerm>();

function doSpawn(m: Extract<SpawnerRequest, { t: "spawn" }>): void {
  const files: number[] = [];
  let child: ChildProcess;
  try {
    const stdio = m.stdio.map((s) => {
      if (typeof s === "string") return s;
      const fd = openSync(s.append, "a");
      files.push(fd);
      return fd;
    });
    // enter.pl checks its parent against this, so a command whose spawner died while it started
    // does not live on unowned.
    const env = { ...m.env, KRUISE_PARENT_PID: String(process.pid) };
    child = spawn(m.file, m.args, { cwd: m.cwd, env, uid: m.uid, gid: m.gid, detached: m.detached, stdio });
  } catch (err) {
    return send({ t: "error", id: m.id, message: (err as Error).message });
  } finally {
    for (const fd of files) closeSync(fd);
  }
  if (child.pid === undefined) {
    child.once("error", (err) => send({ t: "error", id: m.id, message: err.message }));
    return;
  }
  // Node starts reading a child's output pipe as soon as it wraps it; stop that before the event
  // loop runs again, or the first bytes would be read here and lost with the handle we pass on.
  const pipes = child.stdio.map((s, n) => ({ s: s as Socket | null, n })).filter((p) => p.s && m.stdio[p.n] === "pipe");
  for (const { s, n } of pipes) {
    if (n === 0) continue;
    const h = (s as unknown as { _handle: { readStop(): number; reading: boolean } })._handle;
    h.readStop();
    h.reading = false;
  }
  send({ t: "spawned", id: m.id, pid: child.pid, pipes: pipes.map((p) => p.n) });
  // Sent one by one (Node passes one handle per message); each is closed here once delivered.
  for (const { s, n } of pipes) send({ t: "fd", id: m.id, n }, s!);
  child.once("exit", (code, signal) => send({ t: "exit", id: m.id, code, signal }));
}

async function doPty(m: Extract<SpawnerRequest, { t: "pty" }>): Promise<void> {
  const pty = (await import("@lydell/node-pty")).default;
  let term;
  try {
    const env = { ...m.env, KRUISE_PARENT_PID: String(process.pid) };
    term = pty.spawn(m.file, m.args, { name: m.env.TERM ?? "xterm-256color", cols: m.cols || 80, rows: m.rows || 24, cwd: m.cwd, env, uid: m.uid, gid: m.gid, encoding: null });
  } catch (err) {
    return send({ t: "error", id: m.id, message: (err as Error).message });
  }
  const t = term;
  terms.set(m.id, { pid: t.pid, write: (d) => t.write(d as unknown as string), resize: (c, r) => t.resize(c, r) });
  send({ t: "spawned", id: m.id, pid: t.pid, pipes: [] });
  t.onData((d) => send({ t: "data", id: m.id, data: d as unknown as Buffer }));
  t.onExit(({ exitCode, signal }) => {
    terms.delete(m.id);
    send({ t: "exit", id: m.id, code: exitCode, signal: signal || null });
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
send({ t: "ready", pid: process.pid });
