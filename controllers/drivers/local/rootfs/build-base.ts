// Builds the `base` template's layer with mmdebstrap from Debian's archive, once per recipe: the
// layer id carries the recipe's hash, so a cached layer is reused until the recipe changes.
import { execFile, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { join } from "node:path";
import { promisify } from "node:util";
import { baseRecipe, mmdebstrapArgs, recipeKey, type DebianRecipe } from "./recipe.ts";
import { RootfsStore, type LayerInfo } from "./store.ts";

const run = promisify(execFile);

export interface BaseRootfs {
  id: string;
  tree: string;
  info: LayerInfo;
  /** False when the cache already had it. */
  built: boolean;
}

export type Log = (line: string) => void;

/** Why the base cannot be built here, or undefined when it can. */
export async function baseBuildBlocker(): Promise<string | undefined> {
  if (process.getuid?.() !== 0) return "building the base rootfs needs root (mmdebstrap --mode=root)";
  try {
    await run("mmdebstrap", ["--version"]);
  } catch {
    return "mmdebstrap is not installed (apt-get install -y mmdebstrap)";
  }
  return undefined;
}

export function baseLayerId(recipe: DebianRecipe = baseRecipe()): string {
  return `debian-${recipe.suite}-${recipeKey(recipe)}`;
}

export async function ensureBaseRootfs(store = new RootfsStore(), log: Log = (l) => console.log(l)): Promise<BaseRootfs> {
  return ensureRecipeRootfs(store, "base", baseRecipe(), log);
}

async function ensureRecipeRootfs(store: RootfsStore, name: string, recipe: DebianRecipe, log: Log): Promise<BaseRootfs> {
  const id = baseLayerId(recipe);
  let info = store.layer(id);
  const built = info === undefined;
  if (!info) {
    const blocker = await baseBuildBlocker();
    if (blocker) throw new Error(blocker);
    info = await buildLayer(store, id, recipe, log);
  }
  if (store.template(name)?.layers.join() !== id) store.putTemplate(name, [id]);
  return { id, tree: store.layerTree(id), info, built };
}

async function buildLayer(store: RootfsStore, id: string, recipe: DebianRecipe, log: Log): Promise<LayerInfo> {
  const staging = store.stagingDir(id);
  const tree = join(staging, "rootfs");
  const started = Date.now();
  log(`building ${id} (Debian ${recipe.suite} ${recipe.variant} + ${recipe.packages.length} packages) into ${store.root}: downloads from Debian's archive, takes minutes`);
  try {
    await mmdebstrap(mmdebstrapArgs(recipe, tree), recipe, log);
    const { stdout } = await run("dpkg-query", [`--admindir=${tree}/var/lib/dpkg`, "-W", "-f=${Package}\t${Version}\t${Architecture}\n"], { maxBuffer: 16 << 20 });
    const manifest = `${stdout.trim().split("\n").sort().join("\n")}\n`;
    const source = { recipe: { ...recipe, customize: undefined }, key: recipeKey(recipe) };
    const info = await store.commitLayer(staging, { id, kind: "debian", source }, started, manifest);
    log(`built ${id}: ${(info.bytes / 1e6).toFixed(0)} MB, ${info.files} files, ${manifest.split("\n").length - 1} packages, ${info.seconds} s`);
    return info;
  } catch (err) {
    await run("rm", ["-rf", "--one-file-system", staging]).catch(() => {});
    throw err;
  }
}

/** Which of mmdebstrap's lines reach the log (it runs --verbose: apt's and dpkg's output, many
 * lines per package): its stage lines, warnings and errors, and every 50th package dpkg unpacks
 * and configures as a count, the one sign of progress during the longest part of a build. */
export function buildLogLine(line: string, state: { unpacked: number; configured: number }): string | undefined {
  if (/^[IWE]: /.test(line)) return `mmdebstrap: ${line}`;
  if (/^Unpacking /.test(line) && ++state.unpacked % 50 === 0) return `unpacked ${state.unpacked} packages`;
  if (/^Setting up /.test(line) && ++state.configured % 50 === 0) return `configured ${state.configured} packages`;
  return undefined;
}

function mmdebstrap(args: string[], recipe: DebianRecipe, log: Log): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn("mmdebstrap", args, {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, SOURCE_DATE_EPOCH: String(recipe.sourceDateEpoch), LC_ALL: "C.UTF-8", DEBIAN_FRONTEND: "noninteractive" },
    });
    const tail: string[] = [];
    const state = { unpacked: 0, configured: 0 };
    for (const stream of [child.stdout, child.stderr]) {
      createInterface({ input: stream }).on("line", (line) => {
        tail.push(line);
        if (tail.length > 20) tail.shift();
        const shown = buildLogLine(line, state);
        if (shown !== undefined) log(shown);
      });
    }
    child.on("error", reject);
    child.on("close", (code, signal) => {
      if (code === 0) resolve();
      else reject(new Error(`mmdebstrap failed (${signal ?? `exit ${code}`}):\n${tail.join("\n")}`));
    });
  });
}
