// Starts a throwaway system (as `npm start` does, in a temp dir) for test runners in other
// languages: prints one JSON line {apiUrl, apiKey, dataDir} when ready, stops everything and
// removes the dir on SIGTERM/SIGINT or when stdin closes. Used by test/python/system.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { RootfsStore } from "../controllers/drivers/local/rootfs/store.ts";
import { startSystem } from "./lib/system.ts";
import { prebuildTemplates } from "./lib/templates.ts";

const dataDir = mkdtempSync(join(process.env.SBX_TMP ?? tmpdir(), "sbx-sys-"));
// The project's templates before the system starts, outside the tests' timeouts (cached: seconds;
// .ci/run built them). Progress goes to stderr: stdout's first line is the JSON the runner reads.
if (process.getuid?.() === 0) {
  await prebuildTemplates((line) => console.error(line), { progress: true }).catch((err: Error) => console.error(`[prebuild] ${err.message}`));
}
// The code-interpreter templates when their rootfs is built, minted on demand.
const codeInterpreterReplicas = new RootfsStore().templateTrees("code-interpreter") ? 0 : undefined;
const sys = await startSystem({ dataDir, baseReplicas: Number(process.env.BASE_POOL ?? 2), codeInterpreterReplicas });
console.log(JSON.stringify({ apiUrl: sys.apiUrl, apiKey: sys.apiKey, dataDir }));

let stopping = false;
async function stop() {
  if (stopping) return;
  stopping = true;
  await sys.stop();
  rmSync(dataDir, { recursive: true, force: true });
  process.exit(0);
}
process.on("SIGTERM", () => void stop());
process.on("SIGINT", () => void stop());
process.stdin.on("end", () => void stop());
process.stdin.resume();
