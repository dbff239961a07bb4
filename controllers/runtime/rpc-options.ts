// The options of the runtime's Connect handler, in one place: rpc.ts hands them to Connect, and
// Start's lean transport (process/start-stream.ts) applies the same ones, so a limit set here
// binds both ways into Start. An option that transport does not implement (interceptors, a
// request gate) cannot be added without it: start-stream.ts refuses to typecheck.
import type { ConnectRouterOptions } from "@connectrpc/connect";

/** A request message's bound. Connect's default is 4 GiB, allocated from the envelope's length
 * field. No runtime RPC carries file data (uploads go through HTTP /files): a StartRequest is a
 * command line and its environment, which execve bounds at a few MB. */
const READ_MAX_BYTES = 16 * 1024 * 1024;

export const RPC_OPTIONS = {
  readMaxBytes: READ_MAX_BYTES,
  jsonOptions: { ignoreUnknownFields: true },
} as const satisfies Partial<ConnectRouterOptions>;
