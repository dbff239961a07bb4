// Bundles the runtime into one ES module for sandboxes (pod sidecar image, `npm run
// build:runtime`). Running the bundle instead of the .ts sources saves ~30 MB of RSS: no
// TypeScript stripping (its WebAssembly memory never shrinks) and one module instead of
// hundreds. @lydell/node-pty and @napi-rs/xattr stay external (native addons): ship
// node_modules/@lydell and node_modules/@napi-rs beside it.
//   node controllers/runtime/bundle.ts [outfile]   (default dist/runtime/main.cjs)
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

export async function bundleRuntime(outfile: string): Promise<string> {
  await build({
    entryPoints: [fileURLToPath(new URL("./main.ts", import.meta.url))],
    bundle: true,
    platform: "node",
    format: "cjs",
    target: "node22",
    external: ["@lydell/node-pty", "@napi-rs/xattr"],
    outfile,
    logLevel: "warning",
  });
  return outfile;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const out = await bundleRuntime(resolve(process.argv[2] ?? "dist/runtime/main.cjs"));
  console.log(`wrote ${out}`);
}
