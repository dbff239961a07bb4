// `npm start`: the whole system on this machine. sqld (state store) + migrations, the edge bundle on
// workerd, the agent with the local driver, a seeded admin key and a `base` template with a small
// warm pool. Prints the three E2B_* variables to export. State lives in .data/ (override with
// SBX_DATA_DIR), so a restart keeps keys, templates and sandboxes. A part that dies is started
// again with backoff (scripts/lib/supervisor.ts), and the launcher stays in charge until Ctrl-C,
// which stops everything (the agent first: it stops the sandboxes' processes and keeps their files).
import { resolve } from "node:path";
import { RootfsStore } from "../controllers/drivers/local/rootfs/store.ts";
import { baseBuilt, buildBaseInBackground } from "./lib/base-rootfs.ts";
import { quotaDefaults } from "./lib/edge.ts";
import { startSystem } from "./lib/system.ts";
import { putTemplateRootfs, seedCodeInterpreter } from "./seed.ts";

const dataDir = resolve(process.env.SBX_DATA_DIR ?? ".data");
const edgePort = Number(process.env.PORT ?? 8787);
console.log(`starting: sqld, the edge on workerd (port ${edgePort}), the agent (local driver); state in ${dataDir}`);
// Not waited for: the system serves meanwhile (base sandboxes see the host until it is ready).
const builder = buildBaseInBackground((line) => console.log(`[base rootfs] ${line}`));
// The code interpreter's template is built from base once base is there.
const baseReady = builder ? baseBuilt(builder) : Promise.resolve(true);
// Teams get wrangler.toml's default quotas, as a deployment does (the admin API changes them).
const sys = await startSystem({ dataDir, edgePort, baseReplicas: Number(process.env.BASE_POOL ?? 2), agentOutput: "inherit", onExit: "stop", edgeVars: quotaDefaults() });
// Once built, `base`'s spec names its root filesystem: a new revision, so the warm pool replaces
// its unclaimed members made on the host's view (the same revision the seed gives at a restart).
if (builder) {
  void baseBuilt(builder)
    .then(async (ok) => {
      const id = ok ? new RootfsStore().rootfsId("base") : undefined;
      if (!id) return;
      await putTemplateRootfs(sys.apiUrl, sys.apiKey, "base", id);
      console.log("[base rootfs] the warm pool's unclaimed members are being replaced by ones with the root filesystem");
    })
    .catch((err: unknown) => console.error("[base rootfs] could not roll the base pool onto the root filesystem:", err));
}

console.log(`
Ready. Sandboxes run with isolation level: ${sys.isolation}${builder && builder.exitCode === null ? "\n(the base template is still being built: sandboxes see the host's files until it is ready)" : ""}

  export E2B_API_URL=${sys.apiUrl}
  export E2B_SANDBOX_URL=${sys.apiUrl}
  export E2B_API_KEY=${sys.apiKey}

A part that dies (sqld, workerd, the agent) is restarted; restarts are reported here.
Ctrl-C stops everything (sandboxes and state are kept in ${dataDir}).`);

// The code interpreter's template is built from base through this system's own build API (the
// SDK's `Template.build` as the admin team: a build record with status and logs) when its current
// build is not of the current definition and base (its step keys): a changed base or definition
// is built again (cached steps: seconds; a first build minutes, its progress below), an unchanged
// one is kept with its warm members. Then `code-interpreter-v1` (the SDKs' default) and
// `code-interpreter` are registered with a small warm pool.
void baseReady.then(async (ok) => {
  if (!ok) return;
  const log = (line: string) => console.log(`[code-interpreter] ${line}`);
  log("checking the code-interpreter template (built from base through the build API when its definition changed) in the background; it is registered once ready");
  await seedCodeInterpreter(sys.apiUrl, sys.apiKey, Number(process.env.CODE_INTERPRETER_POOL ?? 1), { build: "changed", log });
  log("templates code-interpreter-v1 and code-interpreter are ready (runCode works)");
}).catch((err: unknown) => console.error(`[code-interpreter] building or registering the template failed: ${(err as Error).message}; retry with npm start, or see the agent's build lines with node scripts/prebuild-templates.ts --verbose`));

// The parts run in process groups of their own, so Ctrl-C reaches only this process, which stops
// them in order. Held open so the launcher never ends on its own while a part is down.
setInterval(() => undefined, 1 << 30);

let stopping = false;
for (const sig of ["SIGINT", "SIGTERM"] as const) {
  process.on(sig, () => {
    if (stopping) return;
    stopping = true;
    console.log("\nstopping…");
    void sys.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        console.error("stopping failed:", err);
        process.exit(1);
      },
    );
  });
}
