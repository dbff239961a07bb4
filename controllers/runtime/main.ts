// Entry point of the standalone runtime; flags are parsed in cli.ts.
//
// Memory: glibc gives busy threads their own malloc arenas and keeps what they freed, and V8
// grows its young generation up to 3 × 16 MB under allocation pressure; a runtime serving
// commands gains ~15 MB of RSS that way within a few hundred runs (bench/runtime.ts). Two arenas
// and 2 MB semi-spaces keep it flat at the cost of more frequent (cheap) scavenges. Unless the
// launcher set MALLOC_ARENA_MAX itself, the process re-executes itself once with both (execve
// replaces the process; no wrapper is left behind).
if (!process.env.MALLOC_ARENA_MAX && process.execve) {
  const v8 = process.execArgv.some((a) => a.startsWith("--max-semi-space-size")) ? [] : ["--max-semi-space-size=2"];
  process.execve(process.execPath, [process.execPath, ...v8, ...process.execArgv, ...process.argv.slice(1)], { ...process.env, MALLOC_ARENA_MAX: "2" });
}
void import("./cli.ts").then((cli) => cli.main(process.argv.slice(2)));
export {};
