// Bundles the runtime into one ES module for sandboxes (pod sidecar image, `npm run
// build:runtime`). Running the bundle instead of the .ts sources saves ~30 MB of RSS: no
// TypeScript stripping (its WebAssembly memory never shrinks) and one module instead of
// hundreds. @lydell/node-pty and @napi-rs/xattr stay external (native addons): ship
// node_modules/@lydell and node_modules/@napi-rs beside it. start.cjs goes beside it too: the
// entry that runs it from a V8 code cache (writeCodeCache makes one, as the image build does).
//   node controllers/runtime/bundle.ts [outfile] [--code-cache]   (default dist/runtime/main.cjs)
import { spawnSync } from "node:child_process";
import { copyFileSync, readFileSync } from "node:fs";
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

/** `extra`: more esbuild options (the runtime bench builds variants: without the tracing module, or
 * counting the OpenTelemetry modules a start evaluates). */
export async function bundleRuntime(outfile: string, extra: Pick<BuildOptions, "plugins" | "banner"> = {}): Promise<string> {
  await build({
    ...extra,
    entryPoints: [fileURLToPath(new URL("./main.ts", import.meta.url))],
    bundle: true,
    platform: "node",
    format: "cjs",
    target: "node22",
    external: ["@lydell/node-pty", "@napi-rs/xattr"],
    // The bundle's `Headers` (Connect's, for every request) is this one, not Node's: touching
    // Node's loads undici and compiles its WebAssembly parser (http/web-headers.ts).
    inject: [fileURLToPath(new URL("./http/web-headers.ts", import.meta.url))],
    outfile,
    logLevel: "warning",
    plugins: [connectServerOnly, ...(extra.plugins ?? [])],
  });
  // V8 keeps the bundle's source for lazy compilation, as one string: a single character above
  // U+00FF (esbuild escapes them, except in String.raw templates and kept comments) makes it
  // two bytes per character, 0.8 MB more of every runtime's heap.
  const wide = /[^\x00-\xff]/.exec(readFileSync(outfile, "utf8"));
  if (wide) throw new Error(`runtime bundle: ${JSON.stringify(wide[0])} at offset ${wide.index} makes V8 hold its source in two bytes per character; use ASCII there`);
  copyFileSync(fileURLToPath(new URL("./start.cjs", import.meta.url)), join(dirname(outfile), "start.cjs"));
  return outfile;
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
  if (args.includes("--code-cache")) writeCodeCache(out);
  console.log(`wrote ${out}${args.includes("--code-cache") ? " and its code cache" : ""}`);
}
