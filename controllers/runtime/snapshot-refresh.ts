// For module state that must be the running process's own: in a process started from the
// runtime's startup snapshot (snapshot.ts) every module body ran once, in the process that built
// the snapshot, and what it read then (the machine's CPU times, say) would be that process's.

/** Runs `refresh` again as a process starts from a snapshot being built now; otherwise nothing
 * (the module body that calls it has just run in this process). */
export function refreshAfterSnapshot(refresh: () => void): void {
  // Without reaching for node:v8 (~3 ms of a start) when no snapshot is being built.
  if (!process.execArgv.some((a) => a === "--build-snapshot" || a.startsWith("--build-snapshot="))) return;
  (process.getBuiltinModule("node:v8") as typeof import("node:v8")).startupSnapshot.addDeserializeCallback(refresh);
}
