// How the startup snapshot's bundle (snapshot.ts) loads the native add-ons it leaves out: a
// script run by `--build-snapshot` gets a `require` for Node's built-ins only, so each add-on is
// required at its first use through a require made for the folder the snapshot blob is in (the
// bundle's folder: the add-ons resolve from the node_modules above it, as for main.cjs).
import { createRequire } from "node:module";
import { resolve } from "node:path";

let besideBlob: NodeJS.Require | undefined;

export function requireBesideSnapshot(name: string): unknown {
  besideBlob ??= createRequire(resolve(snapshotBlob(), "..", "main.cjs"));
  return besideBlob(name);
}

/** The --snapshot-blob this process was started with. */
function snapshotBlob(): string {
  const args = process.execArgv;
  for (let i = 0; i < args.length; i++) {
    if (args[i] === "--snapshot-blob" && args[i + 1]) return args[i + 1]!;
    if (args[i]!.startsWith("--snapshot-blob=")) return args[i]!.slice("--snapshot-blob=".length);
  }
  throw new Error("not started from a startup snapshot (no --snapshot-blob)");
}
