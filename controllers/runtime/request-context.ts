// What every RPC handler needs from the request: its sandbox (put there by the runtime's router)
// and the user it acts as (HTTP Basic username, else the sandbox's default user).
import { Code, ConnectError, createContextKey, type HandlerContext } from "@connectrpc/connect";
import type { RuntimeSandbox } from "./sandbox.ts";
import type { SandboxUser } from "./sandbox-view.ts";

export const sandboxKey = createContextKey<RuntimeSandbox | undefined>(undefined, { description: "runtime sandbox" });

export function sandboxOf(ctx: HandlerContext): RuntimeSandbox {
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

export function userOf(ctx: HandlerContext, sbx: RuntimeSandbox = sandboxOf(ctx)): SandboxUser {
  const name = basicAuthUser(ctx.requestHeader.get("authorization"));
  try {
    return sbx.resolveUser(name);
  } catch (err) {
    throw new ConnectError((err as Error).message, Code.Unauthenticated);
  }
}
