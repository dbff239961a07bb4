// Entry of the bundled runtime in a pod (k8s/entrypoint.sh): runs main.cjs (beside this file)
// from the V8 code cache in main.cjs.cache when there is one, so the start does not parse and
// compile the 680 KB bundle again. The cache is made once, when the image is built
// (`--write-code-cache`, below), after the runtime has started and built its Connect services:
// it then holds the functions compiled lazily during start-up too, which Node's own compile
// cache (made at the first compile) leaves out; that one measured no gain here. A cache V8
// rejects (another Node, other V8 flags) is ignored and the bundle compiles as without one.
//   node start.cjs <runtime flags>                 run
//   node start.cjs --write-code-cache <flags>      start, write main.cjs.cache, exit
"use strict";
const { readFileSync, renameSync, writeFileSync } = require("node:fs");
const { join } = require("node:path");
const Module = require("node:module");
const vm = require("node:vm");

const file = join(__dirname, "main.cjs");
const cacheFile = `${file}.cache`;
const write = process.argv[2] === "--write-code-cache";
if (write) process.argv.splice(2, 1);

let cachedData;
if (!write) {
  try {
    cachedData = readFileSync(cacheFile);
  } catch {
    cachedData = undefined;
  }
}
// The two native add-ons load with import(), which a vm.Script runs only through the main
// context's loader; Node calls that option experimental at the first import(): that one notice is
// dropped, every other warning passes.
const emitWarning = process.emitWarning;
process.emitWarning = (warning, ...rest) => {
  if (!String(warning).includes("USE_MAIN_CONTEXT_DEFAULT_LOADER")) emitWarning.call(process, warning, ...rest);
};
const script = new vm.Script(Module.wrap(readFileSync(file, "utf8")), {
  filename: file,
  cachedData,
  importModuleDynamically: vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
});
if (process.env.RUNTIME_CODE_CACHE_DEBUG) process.stderr.write(`code cache: ${cachedData ? (script.cachedDataRejected ? "rejected" : "used") : "none"}\n`);
const bundle = new Module(file, module);
bundle.filename = file;
bundle.paths = Module._nodeModulePaths(__dirname);
bundle.loaded = true;
script.runInThisContext().call(bundle.exports, bundle.exports, Module.createRequire(file), bundle, file, __dirname);

if (write) {
  // After start-up and the deferred Connect build (200 ms idle after listen).
  setTimeout(() => {
    writeFileSync(`${cacheFile}.tmp`, script.createCachedData());
    renameSync(`${cacheFile}.tmp`, cacheFile);
    process.exit(0);
  }, 1_500);
}
