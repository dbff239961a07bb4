// The Connect methods the runtime serves, by path, as a fixed set: a request's span is named by
// the method it matched, never by the path a tenant sent. Kept apart from the generated service
// descriptors so naming a span does not load them (rpc.ts builds the services on first use); a
// unit test (test/unit/runtime/rpc-names.test.ts) keeps it equal to them.
export const RPC_METHODS: Readonly<Record<string, readonly string[]>> = {
  "process.Process": ["List", "Connect", "Start", "Update", "StreamInput", "SendInput", "SendSignal", "CloseStdin"],
  "filesystem.Filesystem": ["Stat", "MakeDir", "Move", "ListDir", "Remove", "WatchDir", "CreateWatcher", "GetWatcherEvents", "RemoveWatcher"],
};

const KNOWN = new Set(Object.entries(RPC_METHODS).flatMap(([service, methods]) => methods.map((m) => `${service}/${m}`)));

/** The span name of an RPC request to `pathname`: its method ("process.Process/Start"), else "rpc.unknown". */
export function rpcSpanName(pathname: string): string {
  const name = pathname.slice(1);
  return KNOWN.has(name) ? name : "rpc.unknown";
}
