// The gateway's answer while a sandbox's cluster agent is not connected (restarting, or its
// ingress unreachable), and for a sandbox whose pid 1 is starting again past the gateway's hold.
// The sandbox is alive as far as the edge knows, so the answer must read as "retry", never as the
// sandbox's death. Each shape is what the e2b SDKs make of it:
// - A Connect server stream (commands.run, watchDir): a 200 stream whose one end-stream message
//   is the error `aborted`. A non-200 answer reaches the SDK as a bare "HTTP 503" with code
//   `unavailable`, and commands.run turns `unavailable` into "Sandbox is probably not running
//   anymore"; `aborted` reaches the user as SandboxError with this message.
// - A Connect unary call: HTTP 409 with Connect's error JSON {code: "aborted", message}.
// - Plain HTTP (files, /health, user ports): 503 with Retry-After. Not 502: that is E2B's answer
//   for a sandbox that is gone, and the SDK's health probe (isRunning(), and the probe after a
//   dropped stream) reads a 502 as "the sandbox was killed or reached its end of life".
import { envelope, END_STREAM, isConnectStream } from "./connect-guard.ts";

const RETRY_AFTER_S = "2";

export function agentUnavailableMessage(sandboxId: string): string {
  const who = sandboxId ? `sandbox ${sandboxId}` : "this sandbox";
  return `The agent of ${who}'s cluster is not connected (it may be restarting); the sandbox was not killed. Retry in a few seconds.`;
}

/** The end-stream envelope of a Connect stream cut or refused because the agent is away. */
export function agentUnavailableEnd(sandboxId: string): Uint8Array {
  return endStreamError(agentUnavailableMessage(sandboxId));
}

function endStreamError(message: string): Uint8Array {
  return envelope(END_STREAM, new TextEncoder().encode(JSON.stringify({ error: { code: "aborted", message } })));
}

export function agentUnavailable(req: Request, sandboxId: string): Response {
  return retryLater(req, sandboxId, agentUnavailableMessage(sandboxId));
}

/** The answer for a sandbox whose pid 1 is starting again and was not back within the gateway's
 * hold (gateway.ts; `waited`: the hold's ms), or not held at all because as many requests as the
 * group allows already wait for it ("crowded"): the same "retry" shapes, as the sandbox is not gone. */
export function sandboxRestarting(req: Request, sandboxId: string, waited: number | "crowded"): Response {
  const why = waited === "crowded" ? "too many requests already wait for it" : `it was not back within ${Math.round(waited / 1000)} s`;
  return retryLater(req, sandboxId, `Sandbox ${sandboxId} is starting again: its init process (pid 1) ended, so it restarts with its files kept and its processes gone, and ${why}. Retry in a few seconds.`);
}

function retryLater(req: Request, sandboxId: string, message: string): Response {
  const headers = { "access-control-allow-origin": "*", "retry-after": RETRY_AFTER_S };
  const contentType = req.headers.get("content-type");
  if (isConnectStream(contentType)) {
    return new Response(endStreamError(message), { status: 200, headers: { ...headers, "content-type": contentType! } });
  }
  if (req.headers.has("connect-protocol-version")) {
    return Response.json({ code: "aborted", message }, { status: 409, headers });
  }
  return Response.json({ sandboxId, code: 503, message }, { status: 503, headers });
}
