// Options the server accepts in shape but does not enforce yet get a 501 that names them, so a
// client never believes an egress proxy is in place when it is not. (`network.rules` are refused
// per cluster, unless its agent said it enforces them: ClusterDO.networkRulesRefusal.)
import { unsupportedNetworkFields } from "./sandbox.ts";
import { ApiError } from "../errors.ts";

export function assertNetworkSupported(network: Parameters<typeof unsupportedNetworkFields>[0], iam?: unknown): void {
  const fields = unsupportedNetworkFields(network);
  if (asksFor(iam)) fields.push("iam");
  if (fields.length) throw new ApiError("not_implemented", `${fields.join(", ")} ${fields.length > 1 ? "are" : "is"} not supported by this server yet`);
}

/** Whether a value carries anything: `{}`, `{tokens: {}}`, null and undefined ask for nothing. */
function asksFor(v: unknown): boolean {
  if (v === undefined || v === null) return false;
  if (typeof v !== "object") return true;
  return Object.values(v).some(asksFor);
}
