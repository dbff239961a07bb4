// Entry of the runtime's startup snapshot (bundle.ts `bundleRuntimeSnapshot` and `writeSnapshot`:
// `node --build-snapshot` on the bundle of this file). Building the snapshot evaluates every module
// the start needs, so a start from it (`node --snapshot-blob main.blob -- <runtime flags>`,
// k8s/entrypoint.sh) deserializes that heap and goes straight to `main`, parsing and running none
// of the bundle's module bodies. Those bodies ran in the process that built the snapshot, so
// nothing they keep may be read from the process: the environment, flags and argv are read in
// `main`; what must be a module's from the start (the first /metrics' CPU baseline) is taken
// again by snapshot-refresh.ts; and no body may draw from crypto.randomUUID (Node keeps its pool
// of random bytes in the snapshot, so every start would hand out the same ids; Math.random is
// reseeded). The modules loaded on first use (/files, Connect's services) stay out: with them the
// blob deserializes slower than they load (controllers/runtime/README.md).
import { startupSnapshot } from "node:v8";
import { main } from "./cli.ts";

// Started from the snapshot there is no script: process.argv is [node, ...runtime flags].
startupSnapshot.setDeserializeMainFunction(() => void main(process.argv.slice(1)));
