import { Code, ConnectError } from "@connectrpc/connect";
import type { StartRequest } from "../../../schema/envd/gen/process/process_pb.js";
import { sandboxOf, userOf, type RpcContext } from "../request-context.ts";
import { lstatPinned } from "../pinned-path.ts";
import { PathOutsideSandboxError } from "../sandbox-view.ts";
import { logger } from "../../lib/log.ts";
import { processEvents } from "./event-stream.ts";
import { ProcessHandle, ProcessStartError } from "./process-handle.ts";

const LOG = logger("runtime");
/** The command as a log line shows it (the sandbox's logs keep it; tenant bytes, so bounded). */
const MAX_LOGGED_COMMAND = 256;

const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** Starts a process and streams its events. The request deadline (Connect-Timeout-Ms) is the
 * process's lifetime, as in envd; a client that merely disconnects leaves it running. */
export async function* start(req: StartRequest, ctx: RpcContext) {
  const sbx = sandboxOf(ctx);
  const user = userOf(ctx, sbx);
  const cfg = req.process;
  if (!cfg?.cmd) throw new ConnectError("process.cmd is required", Code.InvalidArgument);
  const cwd = cfg.cwd ? sbx.resolvePath(cfg.cwd, user) : (sbx.defaultWorkdir ?? user.home);
  // Looked at as the files API looks at a tenant path (pinned, links followed by the view only):
  // a stat of the host path string would follow a link the sandbox swapped in after resolution,
  // and starting or not would tell whether a host directory exists.
  let isDir = false;
  try {
    isDir = lstatPinned(sbx.view, cwd)?.isDirectory() ?? false;
  } catch (err) {
    if (err instanceof PathOutsideSandboxError) throw err;
  }
  if (!isDir) throw new ConnectError(`cwd '${cwd}' does not exist or is not a directory`, Code.InvalidArgument);

  const env = { PATH: DEFAULT_PATH, HOME: user.home, USER: user.name, LOGNAME: user.name, ...sbx.envVars, ...cfg.envs };
  let host;
  try {
    host = sbx.view.command({ cmd: cfg.cmd, args: cfg.args, cwd, env, user });
  } catch (err) {
    throw new ConnectError((err as Error).message, Code.PermissionDenied);
  }
  const config = { cmd: cfg.cmd, args: cfg.args, envs: cfg.envs, cwd: cfg.cwd };
  let handle: ProcessHandle;
  try {
    handle = req.pty
      ? await ProcessHandle.spawnPty(host, config, req.tag, { cols: req.pty.size?.cols ?? 80, rows: req.pty.size?.rows ?? 24 }, sbx.view.launcher)
      : await ProcessHandle.spawnPipes(host, config, req.tag, req.stdin ?? true, sbx.view.launcher);
  } catch (err) {
    if (err instanceof ProcessStartError) throw new ConnectError(err.message, Code.InvalidArgument);
    throw err;
  }
  sbx.processes.add(handle);
  const command = [cfg.cmd, ...cfg.args].join(" ").slice(0, MAX_LOGGED_COMMAND);
  LOG.info("process started", { sandboxId: sbx.id, pid: handle.pid, cmd: command, ...(req.tag ? { tag: req.tag.slice(0, MAX_LOGGED_COMMAND) } : {}) });
  void handle.exited().then(() => {
    const end = handle.end;
    LOG.info("process exited", { sandboxId: sbx.id, pid: handle.pid, exitCode: end?.exitCode, ...(end?.error ? { error: end.error } : {}) });
  });

  // Connect's own deadline timer and this kill timer expire within a millisecond of each other
  // (each rounds the remaining time); when the kill wins, the process's end can reach the stream
  // before the deadline aborts it. Whichever fires first, the client sees what the deadline
  // sends: no end event, deadline_exceeded with Connect's text (the bytes do not depend on a race).
  const deadline = ctx.timeoutMs();
  let expired = false;
  if (deadline !== undefined) {
    const timer = setTimeout(() => { expired = true; handle.signal("SIGKILL"); }, deadline);
    void handle.exited().then(() => clearTimeout(timer));
  }
  for await (const ev of processEvents(ctx, handle)) {
    if (expired) break;
    yield ev;
  }
  if (expired) throw new ConnectError("the operation timed out", Code.DeadlineExceeded);
}
