// What every RPC handler needs from the request: its sandbox (put there by the runtime's router)
// and the user it acts as (HTTP Basic username, else the sandbox's default user).
import { Code, ConnectError, createContextKey, type ContextValues } from "@connectrpc/connect";
import type { RuntimeSandbox } from "./sandbox.ts";
import type { SandboxUser } from "./sandbox-view.ts";

/** What an RPC handler reads from its request: Connect's HandlerContext has it, and so does the
 * lean transport of process.Process/Start (process/start-stream.ts). */
export interface RpcContext {
  readonly values: Pick<ContextValues, "get">;
  readonly requestHeader: { get(name: string): string | null };
  readonly signal: AbortSignal;
  timeoutMs(): number | undefined;
}

export const sandboxKey = createContextKey<RuntimeSandbox | undefined>(undefined, { description: "runtime sandbox" });

export function sandboxOf(ctx: RpcContext): RuntimeSandbox {
  const sbx = ctx.values.get(sandboxKey);
  if (!sbx) throw new ConnectError("sandbox not found", Code.Unavailable);
  return sbx;
}

/** The username of `Authorization: Basic base64("<user>:")`, or undefined. */
export function basicAuthUser(header: string | null | undefined): string | undefined {
  if (!header?.toLowerCase().startsWith("basic ")) return undefined;
  const decoded = Buffer.from(header.slice(6).trim(), "base64").toString("utf8");
  const i = decoded.indexOf(":");
  const name = i < 0 ? decoded : decoded.slice(0, i);
  return name || undefined;
}

export function userOf(ctx: RpcContext, sbx: RuntimeSandbox = sandboxOf(ctx)): SandboxUser {
  const name = basicAuthUser(ctx.requestHeader.get("authorization"));
  try {
    return sbx.resolveUser(name);
  } catch (err) {
    throw new ConnectError((err as Error).message, Code.Unauthenticated);
  }
}
