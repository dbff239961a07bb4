// Entry point of the standalone runtime; flags are parsed in cli.ts.
//
// glibc gives busy threads their own malloc arenas and keeps what they freed: a runtime serving
// commands grows ~15 MB of RSS that way within a few hundred runs (bench/runtime.ts). Two arenas
// keep it flat, so unless the launcher chose a value the process re-executes itself with it
// (execve replaces the process; no wrapper is left behind). Set MALLOC_ARENA_MAX to opt out.
if (!process.env.MALLOC_ARENA_MAX && process.execve) {
  process.execve(process.execPath, [process.execPath, ...process.execArgv, ...process.argv.slice(1)], { ...process.env, MALLOC_ARENA_MAX: "2" });
}
await import("./cli.ts");
export {};
