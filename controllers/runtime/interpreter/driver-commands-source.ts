// The part the node-run kernel drivers (JavaScript's and bash's) share, spliced into their sources:
// reading the runtime's command lines from stdin. It expects `queue`, `current`, `next()` and
// `interrupt()` in the driver's scope. A restart is the runtime's (it starts a fresh driver).
export const DRIVER_COMMANDS_SOURCE = String.raw`
  const commands = require("node:readline").createInterface({ input: process.stdin, crlfDelay: Infinity });
  commands.on("line", (raw) => {
    let cmd;
    try {
      cmd = JSON.parse(raw);
    } catch {
      return;
    }
    if (!cmd || typeof cmd !== "object" || typeof cmd.id !== "number") return;
    if (cmd.op === "cancel") {
      const job = queue.find((j) => j.id === cmd.id);
      if (job) job.cancelled = true;
      else if (current && current.id === cmd.id) interrupt();
      return;
    }
    if (cmd.op !== "execute" || typeof cmd.code !== "string") return;
    // Env var names reach bash's source and process.env: only names (the runtime checks them too).
    for (const k of Object.keys(cmd.env || {})) if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) return;
    queue.push(cmd);
    next();
  });
  commands.on("close", () => process.exit(0));
  send({ ready: true, pid: process.pid });
`;
