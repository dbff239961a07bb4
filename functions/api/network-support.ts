// Network options the server accepts in shape but does not enforce yet get a 501 that names them,
// so a client never believes an egress proxy or a header transform is in place when it is not.
import { unsupportedNetworkFields } from "../../schema/api/sandbox.ts";
import { ApiError } from "../api-error.ts";

export function assertNetworkSupported(network: Parameters<typeof unsupportedNetworkFields>[0]): void {
  const fields = unsupportedNetworkFields(network);
  if (fields.length) throw new ApiError("not_implemented", `network.${fields.join(", network.")} ${fields.length > 1 ? "are" : "is"} not supported by this server yet`);
}
