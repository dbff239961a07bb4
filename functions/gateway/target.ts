// Which sandbox and port a data-plane request is for, as E2B's proxy decides it: the
// `E2b-Sandbox-Id` / `E2b-Sandbox-Port` headers (what the SDK sends when E2B_SANDBOX_URL is set),
// else a host of the form `{port}-{sandboxId}.{domain}`. Neither: a control-plane request.
import { SANDBOX_ID_PATTERN } from "../../schema/protocol/ids.ts";

export const ENVD_PORT = 49983;

export interface GatewayTarget {
  sandboxId: string;
  port: number;
}


function validPort(n: number): boolean {
  return Number.isInteger(n) && n >= 1 && n <= 65535;
}

/** `undefined`: not a data-plane request. `{error}`: one, but malformed (a 400, never a guess). */
export function gatewayTarget(headers: Headers, host: string | null): GatewayTarget | { error: string } | undefined {
  const id = headers.get("e2b-sandbox-id");
  if (id !== null) {
    const portHeader = headers.get("e2b-sandbox-port");
    const port = portHeader === null ? ENVD_PORT : Number(portHeader);
    if (!SANDBOX_ID_PATTERN.test(id)) return { error: "E2b-Sandbox-Id must be [a-z0-9]+" };
    if (!validPort(port)) return { error: "E2b-Sandbox-Port must be a port number" };
    return { sandboxId: id, port };
  }
  const m = host ? /^(\d{1,5})-([a-z0-9]{1,64})\./.exec(host) : null;
  if (!m) return undefined;
  const port = Number(m[1]);
  if (!validPort(port)) return { error: "invalid port in host" };
  return { sandboxId: m[2]!, port };
}
