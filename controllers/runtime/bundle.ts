// Bundles the runtime into one CommonJS file for sandboxes (pod sidecar image, `npm run
// build:runtime`). Running the bundle instead of the .ts sources saves ~30 MB of RSS: no
// TypeScript stripping (its WebAssembly memory never shrinks) and one module instead of
// hundreds. @lydell/node-pty and @napi-rs/xattr stay external (native addons): ship
// node_modules/@lydell and node_modules/@napi-rs beside it. start.cjs goes beside it too: the
// entry that runs it from a V8 code cache (writeCodeCache makes one, as the image build does).
// In a pod the runtime starts from a startup snapshot of it (main.blob, `--snapshot`: built from
// snapshot.cjs, see snapshot.ts), without one from start.cjs (k8s/entrypoint.sh).
//   node controllers/runtime/bundle.ts [outfile] [--code-cache] [--snapshot]
//        (default dist/runtime/main.cjs; the cache, snapshot.cjs and main.blob go beside it)
import { spawnSync } from "node:child_process";
import { copyFileSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { build, type BuildOptions, type Plugin } from "esbuild";

/** The node flags a pod starts the runtime with (k8s/entrypoint.sh). V8 accepts a code cache only
 * under the flags it was made with. */
export const RUNTIME_NODE_FLAGS = ["--max-semi-space-size=2"];

/** The runtime serves HTTP/1.1 (node:http) and uses only the server side of
 * @connectrpc/connect-node. Through the package's index the bundle would load its client side too
 * (node:https, and node:http2 for its session manager), and the server adapter names node:http2
 * only for one RFC 7540 constant on HTTP/2 streams, which never reach it. Loading node:http2 and
 * node:tls costs ~6 MB of RSS and ~35 ms of CPU in a bare Node process; so rpc.ts gets the adapter
 * module itself, and the adapter that constant. The build checks that the constant is still all it
 * uses and otherwise leaves node:http2 as it is. */
const connectServerOnly: Plugin = {
  name: "connect-node-server-only",
  setup(b) {
    b.onResolve({ filter: /^@connectrpc\/connect-node$/ }, async (args) => {
      if (!args.importer.endsWith(`${sep}rpc.ts`)) return undefined;
      const index = await b.resolve(args.path, { kind: args.kind, resolveDir: args.resolveDir });
      if (index.errors.length > 0) return { errors: index.errors };
      return { path: join(dirname(index.path), "connect-node-adapter.js") };
    });
    b.onResolve({ filter: /^node:http2$/ }, (args) => {
      if (!args.importer.endsWith(`${sep}connect-node${sep}dist${sep}esm${sep}node-universal-handler.js`)) return undefined;
      const uses = readFileSync(args.importer, "utf8").match(/\bhttp2\.[\w.]+/g) ?? [];
      if (uses.length === 0 || uses.some((u) => u !== "http2.constants.NGHTTP2_NO_ERROR")) return undefined;
      return { path: "http2-constants", namespace: "runtime-stub" };
    });
    b.onLoad({ filter: /.*/, namespace: "runtime-stub" }, () => ({ contents: "export const constants = { NGHTTP2_NO_ERROR: 0 };", loader: "js" }));
  },
};

const RUNTIME_BUILD: BuildOptions = {
  bundle: true,
  platform: "node",
  format: "cjs",
  target: "node22",
  // The bundle's `Headers` (Connect's, for every request) is this one, not Node's: touching
  // Node's loads undici and compiles its WebAssembly parser (http/web-headers.ts).
  inject: [fileURLToPath(new URL("./http/web-headers.ts", import.meta.url))],
  logLevel: "warning",
};

/** `extra`: more esbuild options (the runtime bench builds variants: without the tracing module, or
 * counting the OpenTelemetry modules a start evaluates). */
export async function bundleRuntime(outfile: string, extra: Pick<BuildOptions, "plugins" | "banner"> = {}): Promise<string> {
  await build({
    ...RUNTIME_BUILD,
    ...extra,
    entryPoints: [fileURLToPath(new URL("./main.ts", import.meta.url))],
    external: ["@lydell/node-pty", "@napi-rs/xattr"],
    outfile,
    plugins: [connectServerOnly, ...(extra.plugins ?? [])],
  });
  oneBytePerCharacter(outfile);
  copyFileSync(fileURLToPath(new URL("./start.cjs", import.meta.url)), join(dirname(outfile), "start.cjs"));
  return outfile;
}

/** V8 keeps the bundle's source for lazy compilation, as one string: a single character above
 * U+00FF (esbuild escapes them, except in String.raw templates and kept comments) makes it two
 * bytes per character, 0.8 MB more of every runtime's heap. */
function oneBytePerCharacter(outfile: string): void {
  const wide = /[^\x00-\xff]/.exec(readFileSync(outfile, "utf8"));
  if (wide) throw new Error(`runtime bundle: ${JSON.stringify(wide[0])} at offset ${wide.index} makes V8 hold its source in two bytes per character; use ASCII there`);
}

/** The built-ins `node --build-snapshot` aborts on once loaded (Node 22: node:http and what
 * loads it; CheckGlobalAndEternalHandles). The snapshot's bundle gets each as a module of lazy
 * getters, one per export of the real module, which loads it at the first use of any: the
 * modules' bodies only name them (`createServer` is called by listen, after deserialization). */
const NOT_IN_SNAPSHOT = /^(node:)?(http|https|tls|http2)$/;
/** The native add-ons, loaded at their first use beside the blob (snapshot-require.ts). */
const ADDONS = /^(@lydell\/node-pty|@napi-rs\/xattr)$/;

const snapshotShims: Plugin = {
  name: "snapshot-shims",
  setup(b) {
    b.onResolve({ filter: NOT_IN_SNAPSHOT }, (args) => ({ path: args.path.replace(/^node:/, ""), namespace: "lazy-builtin" }));
    b.onLoad({ filter: /.*/, namespace: "lazy-builtin" }, (args) => {
      const name = `node:${args.path}`;
      const keys = Object.keys(process.getBuiltinModule(name) as object);
      return {
        contents: `let m;\nconst load = () => (m ??= process.getBuiltinModule(${JSON.stringify(name)}));\nfor (const k of ${JSON.stringify(keys)}) Object.defineProperty(exports, k, { get: () => load()[k], enumerable: true });\n`,
        loader: "js",
      };
    });
    b.onResolve({ filter: ADDONS }, (args) => ({ path: args.path, namespace: "addon-beside-blob" }));
    b.onLoad({ filter: /.*/, namespace: "addon-beside-blob" }, (args) => ({
      contents: `const { requireBesideSnapshot } = require(${JSON.stringify(fileURLToPath(new URL("./snapshot-require.ts", import.meta.url)))});\nmodule.exports = requireBesideSnapshot(${JSON.stringify(args.path)});\n`,
      loader: "js",
      resolveDir: dirname(fileURLToPath(import.meta.url)),
    }));
  },
};

/** The bundle a startup snapshot is built from (snapshot.ts as entry, `snapshot.cjs` beside
 * `main.cjs`): the same code, with the built-ins a snapshot cannot hold and the add-ons taken at
 * first use. A module body that touches one of those built-ins' exports as it loads makes the
 * snapshot build abort, not a snapshot that differs. `extra` as for bundleRuntime. */
export async function bundleRuntimeSnapshot(outfile: string, extra: Pick<BuildOptions, "plugins"> = {}): Promise<string> {
  await build({
    ...RUNTIME_BUILD,
    entryPoints: [fileURLToPath(new URL("./snapshot.ts", import.meta.url))],
    outfile,
    plugins: [connectServerOnly, snapshotShims, ...(extra.plugins ?? [])],
  });
  oneBytePerCharacter(outfile);
  return outfile;
}

/** Builds `main.blob` (or `opts.name`) beside `snapshotBundle` with the flags a pod starts the
 * runtime with. The blob carries V8's code cache of Node's built-ins too (3.8 MB of its 6.7, read
 * into each process's private memory, where a start without a user snapshot maps the same from
 * the node binary's shared pages); `withoutCodeCache` leaves it out, and the built-ins a start
 * loads are compiled instead (the runtime bench measures both). */
export function writeSnapshot(snapshotBundle: string, opts: { name?: string; withoutCodeCache?: boolean } = {}): string {
  const blob = join(dirname(snapshotBundle), opts.name ?? "main.blob");
  const config = `${blob}.config.json`;
  writeFileSync(config, JSON.stringify({ builder: resolve(snapshotBundle), withoutCodeCache: opts.withoutCodeCache ?? false }));
  const res = spawnSync(process.execPath, [...RUNTIME_NODE_FLAGS, "--snapshot-blob", `${blob}.tmp`, "--build-snapshot-config", config], { encoding: "utf8", timeout: 60_000 });
  rmSync(config, { force: true });
  if (res.status !== 0) throw new Error(`startup snapshot not built (${res.status ?? res.signal}): ${res.stderr}`);
  renameSync(`${blob}.tmp`, blob);
  return blob;
}

/** Starts the bundle once through start.cjs to write its code cache (`<bundle>.cache`). */
export function writeCodeCache(outfile: string): void {
  const start = join(dirname(outfile), "start.cjs");
  const res = spawnSync(process.execPath, [...RUNTIME_NODE_FLAGS, start, "--write-code-cache", "--port", "0", "--host", "127.0.0.1"], {
    env: { ...process.env, MALLOC_ARENA_MAX: "2" },
    encoding: "utf8",
    timeout: 60_000,
  });
  if (res.status !== 0) throw new Error(`code cache not written (${res.status ?? res.signal}): ${res.stderr}`);
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const out = await bundleRuntime(resolve(args.find((a) => !a.startsWith("--")) ?? "dist/runtime/main.cjs"));
  const wrote = [out];
  if (args.includes("--code-cache")) {
    writeCodeCache(out);
    wrote.push(`${out}.cache`);
  }
  if (args.includes("--snapshot")) {
    const snapshotBundle = await bundleRuntimeSnapshot(join(dirname(out), "snapshot.cjs"));
    wrote.push(snapshotBundle, writeSnapshot(snapshotBundle));
  }
  console.log(`wrote ${wrote.join(", ")}`);
}
