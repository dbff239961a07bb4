// POST /freeze and /unfreeze: stop and resume the sandbox's user processes before and after a
// pause. The view's cgroup freezer when it has one; otherwise SIGSTOP/SIGCONT to the process
// groups the runtime started (processes that left their group are not reached).
import type { IncomingMessage, ServerResponse } from "node:http";
import type { RuntimeSandbox } from "../sandbox.ts";

export async function freezeSandbox(sbx: RuntimeSandbox): Promise<void> {
  if (sbx.view.freeze) return sbx.view.freeze();
  for (const p of sbx.processes.live()) p.signalGroup("SIGSTOP");
}

export async function thawSandbox(sbx: RuntimeSandbox): Promise<void> {
  if (sbx.view.thaw) return sbx.view.thaw();
  for (const p of sbx.processes.live()) p.signalGroup("SIGCONT");
}

export async function postFreeze(_req: IncomingMessage, res: ServerResponse, sbx: RuntimeSandbox): Promise<void> {
  await freezeSandbox(sbx);
  res.writeHead(204).end();
}

export async function postUnfreeze(_req: IncomingMessage, res: ServerResponse, sbx: RuntimeSandbox): Promise<void> {
  await thawSandbox(sbx);
  res.writeHead(204).end();
}
