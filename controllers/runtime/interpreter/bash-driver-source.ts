// The bash kernel driver's source, run inside the sandbox as `node -e <source>` by the sandbox's own
// node (E2B's bash context). It keeps one bash alive so cwd, variables, functions and aliases set
// by a cell persist for the next. The same line protocol as the other drivers; interrupt is SIGINT
// to the driver, which passes it to the cell's processes.
// A cell reaches bash as a file it sources (never as typed input, so an unbalanced quote cannot
// swallow what follows); after it bash prints a marker with the cell's status on both streams, so
// the driver knows the cell's output is complete. A non-zero status is the cell's error, as in
// Jupyter's bash kernel.
import { DRIVER_COMMANDS_SOURCE } from "./driver-commands-source.ts";

export const BASH_DRIVER_SOURCE = String.raw`(() => {
  "use strict";
  const { spawn } = require("node:child_process");
  const { mkdtempSync, writeFileSync, rmSync } = require("node:fs");
  const { tmpdir } = require("node:os");
  const { join } = require("node:path");
  const { randomBytes } = require("node:crypto");

  const send = (msg) => process.stdout.write(JSON.stringify(msg) + "\n");
  const dir = mkdtempSync(join(tmpdir(), "e2b-bash-"));
  const marker = "__E2B_DONE_" + randomBytes(12).toString("hex");
  let bash, current = null, executions = 0;
  const queue = [];

  function startBash() {
    // Its own process group: SIGINT reaches the cell's commands, not this driver.
    bash = spawn("/bin/bash", ["--noprofile", "--norc"], { stdio: ["pipe", "pipe", "pipe"], detached: true, env: process.env });
    const streams = { stdout: "", stderr: "" };
    const status = { stdout: null, stderr: null };
    const pump = (kind) => (chunk) => {
      streams[kind] += chunk;
      for (;;) {
        const at = streams[kind].indexOf(marker);
        if (at < 0) {
          // Keep back what could be the start of the marker.
          const safe = Math.max(0, streams[kind].length - marker.length - 16);
          if (safe > 0 && current) send({ id: current.id, line: { type: kind, text: streams[kind].slice(0, safe), timestamp: Date.now() * 1000 } });
          streams[kind] = streams[kind].slice(safe);
          return;
        }
        const end = streams[kind].indexOf("\n", at);
        if (end < 0) return;
        let before = streams[kind].slice(0, at);
        if (before.endsWith("\n")) before = before.slice(0, -1); // the newline the marker printf added
        if (before && current) send({ id: current.id, line: { type: kind, text: before, timestamp: Date.now() * 1000 } });
        status[kind] = Number(streams[kind].slice(at + marker.length, end).trim());
        streams[kind] = streams[kind].slice(end + 1);
        if (status.stdout !== null && status.stderr !== null) {
          const rc = status.stdout;
          status.stdout = status.stderr = null;
          finish(rc);
        }
      }
    };
    // An interrupt ends the sourced cell (its trap returns from it), not bash and its state.
    bash.stdin.write("trap 'return 130 2>/dev/null' INT\n");
    bash.stdout.setEncoding("utf8").on("data", pump("stdout"));
    bash.stderr.setEncoding("utf8").on("data", pump("stderr"));
    bash.on("exit", (code, signal) => {
      // The cell ended bash (exit, or an interrupt): report it and start a new one.
      if (current) {
        send({ id: current.id, line: { type: "error", name: "BashExit", value: "bash exited (" + (signal || "code " + code) + "); a new bash starts with a fresh state", traceback: "" } });
        finish(null);
      }
      startBash();
    });
  }

  function finish(rc) {
    const job = current;
    if (!job) return;
    if (rc) send({ id: job.id, line: { type: "error", name: "Error", value: "exit status " + rc, traceback: "" } });
    send({ id: job.id, line: { type: "end_of_execution" } });
    send({ id: job.id, done: true });
    current = null;
    setImmediate(next);
  }

  const quote = (s) => "'" + s.replace(/'/g, "'\\''") + "'";
  function next() {
    if (current) return;
    const job = queue.shift();
    if (!job) return;
    if (job.cancelled) {
      send({ id: job.id, done: true });
      return next();
    }
    current = job;
    send({ id: job.id, line: { type: "number_of_executions", execution_count: ++executions } });
    const file = join(dir, "cell");
    writeFileSync(file, job.code.endsWith("\n") ? job.code : job.code + "\n");
    const env = Object.entries(job.env || {});
    // Env vars for one cell: exported in a subshell-free way and restored after it.
    const set = env.map(([k, v]) => "__e2b_saved_" + k + "=$" + "{" + k + "-__e2b_unset}; export " + k + "=" + quote(v) + ";").join(" ");
    const restore = env.map(([k]) => "if [ \"$__e2b_saved_" + k + "\" = __e2b_unset ]; then unset " + k + "; else export " + k + "=\"$__e2b_saved_" + k + "\"; fi; unset __e2b_saved_" + k + ";").join(" ");
    bash.stdin.write(set + " . " + quote(file) + " < /dev/null; __e2b_rc=$?; " + restore + " printf '\\n" + marker + " %d\\n' \"$__e2b_rc\"; printf '\\n" + marker + " %d\\n' \"$__e2b_rc\" >&2\n");
  }

  process.on("SIGINT", () => {
    if (!current) return;
    try {
      process.kill(-bash.pid, "SIGINT");
    } catch {}
  });
  process.on("exit", () => {
    try {
      rmSync(dir, { recursive: true, force: true });
      process.kill(-bash.pid, "SIGKILL");
    } catch {}
  });

  startBash();
  const interrupt = () => process.emit("SIGINT");
${DRIVER_COMMANDS_SOURCE}})();
`;
