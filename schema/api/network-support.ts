// Options the server accepts in shape but does not enforce yet get a 501 that names them, so a
// client never believes an egress proxy, a header transform or injected credentials are in place
// when they are not.
import { unsupportedNetworkFields } from "./sandbox.ts";
import { ApiError } from "../errors.ts";

export function assertNetworkSupported(network: Parameters<typeof unsupportedNetworkFields>[0], iam?: unknown, at: "create" | "update" = "create"): void {
  const fields = unsupportedNetworkFields(network, at);
  if (asksFor(iam)) fields.push("iam");
  if (fields.length) throw new ApiError("not_implemented", `${fields.join(", ")} ${fields.length > 1 ? "are" : "is"} not supported by this server yet`);
}

/** Whether a value carries anything: `{}`, `{tokens: {}}`, null and undefined ask for nothing. */
function asksFor(v: unknown): boolean {
  if (v === undefined || v === null) return false;
  if (typeof v !== "object") return true;
  return Object.values(v).some(asksFor);
}
