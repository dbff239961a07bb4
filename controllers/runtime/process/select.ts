// A process named by an RPC's selector, or the RPC's error: invalid_argument without a selector,
// not_found for no such (live) process.
import { Code, ConnectError } from "@connectrpc/connect";
import type { ProcessHandle } from "./process-handle.ts";
import type { ProcessTable, Selector } from "./process-table.ts";

export function selectProcess(table: ProcessTable, sel: Selector | undefined, opts: { live?: boolean } = {}): ProcessHandle {
  const found = table.find(sel, opts);
  if ("missing" in found) throw new ConnectError(found.message, found.missing === "selector" ? Code.InvalidArgument : Code.NotFound);
  return found;
}
