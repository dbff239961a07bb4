// The on-disk registry of template root filesystems: layers (read-only directory trees, shared by
// every sandbox of a template) and templates (a name and its layers, bottom first).
//
//   <root>/layers/<id>/rootfs/      the tree, as `/` will see it
//   <root>/layers/<id>/layer.json   what built it, when, its size
//   <root>/layers/<id>/manifest.txt what is inside (package versions, or the image's digests)
//   <root>/templates/<name>.json    { name, layers: [id…], … }
//
// A layer appears by rename from a private build directory, so a half-built one is never seen.
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { treeSize } from "./tree-size.ts";
import { removeTree } from "../remove-tree.ts";

export interface LayerInfo {
  id: string;
  kind: "debian" | "oci" | "build";
  /** Seconds the build or import took. */
  seconds: number;
  bytes: number;
  files: number;
  createdAt: string;
  source: Record<string, unknown>;
  /** The team whose build made it (a build step's layer; never shared between teams: plan.ts).
   * Its team's cache bound counts it (retire.ts `trim`). Absent: a base or imported layer, or one
   * an older agent built (never trimmed). */
  team?: string;
}

export interface TemplateRecord {
  name: string;
  /** Layer ids, bottom first (overlayfs lists them top first: reverse before mounting). */
  layers: string[];
  createdAt: string;
}

const NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;
const LAYER_ID = /^[a-z0-9][a-z0-9-]{0,80}$/;

export function defaultRootfsDir(): string {
  return process.env.SBX_ROOTFS_DIR ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), ".cache"), "sandbox-edge", "rootfs");
}

export function validTemplateName(name: string): string {
  if (!NAME.test(name)) throw new Error(`template name ${JSON.stringify(name)} must be 1-63 of a-z 0-9 . _ - starting with a letter or digit`);
  return name;
}

export class RootfsStore {
  readonly root: string;
  constructor(root: string = defaultRootfsDir()) {
    this.root = root;
  }

  layerDir(id: string): string {
    if (!LAYER_ID.test(id)) throw new Error(`bad layer id ${JSON.stringify(id)}`);
    return join(this.root, "layers", id);
  }

  /** The tree to mount (or chroot into) for a layer. */
  layerTree(id: string): string {
    return join(this.layerDir(id), "rootfs");
  }

  layer(id: string): LayerInfo | undefined {
    return readJson<LayerInfo>(join(this.layerDir(id), "layer.json"));
  }

  /** Published layers with what they say of themselves and when a build last used them (the
   * mtime of `layer.json`: written at publish, touched by `touchLayer`). */
  layers(): (LayerInfo & { usedAt: number })[] {
    let names: string[];
    try {
      names = readdirSync(join(this.root, "layers")).filter((n) => LAYER_ID.test(n));
    } catch {
      return [];
    }
    return names.flatMap((id) => {
      const file = join(this.layerDir(id), "layer.json");
      const info = readJson<LayerInfo>(file);
      const st = statSync(file, { throwIfNoEntry: false });
      return info && st ? [{ ...info, usedAt: st.mtimeMs }] : [];
    });
  }

  /** Notes that a build used a layer from the cache now (the cache bound evicts the least recently used). */
  touchLayer(id: string): void {
    const now = new Date();
    try {
      utimesSync(join(this.layerDir(id), "layer.json"), now, now);
    } catch {
      // removed meanwhile: nothing to note
    }
  }

  manifest(id: string): string | undefined {
    try {
      return readFileSync(join(this.layerDir(id), "manifest.txt"), "utf8");
    } catch {
      return undefined;
    }
  }

  /** A fresh private directory to build a layer in; `commitLayer` publishes it. 0700: it holds a
   * build step's tree (the tenant's, with set-uid files owned by the step's root) and, without a
   * step disk, its upper directory; a store outside root's home (SBX_ROOTFS_DIR) must not let
   * other host users reach them. Only root works in it (bwrap reaches a step's root at
   * STEP_ROOTS), and the layer it becomes by rename keeps the mode. */
  stagingDir(id: string): string {
    const dir = join(this.root, "layers", `.build-${id}-${process.pid}-${Date.now()}`);
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(join(this.root, "layers"), { recursive: true });
    mkdirSync(dir, { mode: 0o700 });
    return dir;
  }

  /** Publishes a staged layer (with `rootfs/` inside) under its id, measured. If another builder
   * won the race, theirs stays and ours is removed: both were built from the same input. */
  async commitLayer(staging: string, layer: Pick<LayerInfo, "id" | "kind" | "source" | "team">, startedMs: number, manifest: string, measured?: { bytes: number; files: number }): Promise<LayerInfo> {
    const info: LayerInfo = {
      ...layer,
      seconds: Math.round((Date.now() - startedMs) / 100) / 10,
      ...(measured ?? (await treeSize(join(staging, "rootfs")))),
      createdAt: new Date().toISOString(),
    };
    writeFileSync(join(staging, "manifest.txt"), manifest);
    writeFileSync(join(staging, "layer.json"), `${JSON.stringify(info, null, 2)}\n`);
    try {
      renameSync(staging, this.layerDir(info.id));
    } catch (err) {
      if (!this.layer(info.id)) throw err;
      await removeTree([staging]);
    }
    return info;
  }

  /** Takes a layer out of the store at once (a rename, before this returns its promise: a caller's
   * check that nothing uses it and the removal are one synchronous block), then deletes its tree
   * (a build step's: remove-tree.ts) together with what an earlier removal of the same id left.
   * Rejects when something of it could not go; it is tried again with the next removal of the id
   * or the next `prune`. */
  removeLayer(id: string): Promise<void> {
    const layers = join(this.root, "layers");
    try {
      renameSync(this.layerDir(id), join(layers, `.remove-${id}-${process.pid}-${Date.now()}`));
    } catch {
      // gone already, or never here: an earlier removal's leftovers may still be
    }
    let names: string[];
    try {
      const mine = new RegExp(`^\\.remove-${id}-\\d+-\\d+$`);
      names = readdirSync(layers).filter((n) => mine.test(n));
    } catch {
      return Promise.resolve();
    }
    return removeTree(names.map((n) => join(layers, n)));
  }

  /** Removes layers no template names, and build directories whose builder is gone; returns their ids. Manual
   * (`cli.ts prune`): once sandboxes mount layers, one may still use a layer its template left. */
  async prune(): Promise<string[]> {
    const used = new Set(this.templates().flatMap((t) => t.layers));
    let names: string[];
    try {
      names = readdirSync(join(this.root, "layers"));
    } catch {
      return [];
    }
    const gone = names.filter((n) => !used.has(n) && !buildingNow(n));
    for (const n of gone) {
      if (n.startsWith(".")) await removeTree([join(this.root, "layers", n)]);
      else await this.removeLayer(n);
    }
    return gone;
  }

  putTemplate(name: string, layers: string[]): TemplateRecord {
    validTemplateName(name);
    for (const id of layers) if (!this.layer(id)) throw new Error(`template ${name}: layer ${id} is not in ${this.root}`);
    const record: TemplateRecord = { name, layers, createdAt: new Date().toISOString() };
    const dir = join(this.root, "templates");
    mkdirSync(dir, { recursive: true });
    const tmp = join(dir, `.${name}.${process.pid}.json`);
    writeFileSync(tmp, `${JSON.stringify(record, null, 2)}\n`);
    renameSync(tmp, join(dir, `${name}.json`));
    return record;
  }

  template(name: string): TemplateRecord | undefined {
    return readJson<TemplateRecord>(join(this.root, "templates", `${validTemplateName(name)}.json`));
  }

  /** A template's layer trees, bottom first; undefined if it or any layer is missing. */
  templateTrees(name: string): string[] | undefined {
    const t = this.template(name);
    if (!t || !t.layers.every((id) => this.layer(id))) return undefined;
    return t.layers.map((id) => this.layerTree(id));
  }

  /** What a template's root filesystem is, for a template spec's `rootfsId`: its layer ids, bottom
   * first, joined by dots (a rebuilt layer has a new id); undefined while it is not all there. */
  rootfsId(name: string): string | undefined {
    return this.templateTrees(name) ? this.template(name)!.layers.join(".") : undefined;
  }

  templates(): TemplateRecord[] {
    let names: string[];
    try {
      names = readdirSync(join(this.root, "templates"));
    } catch {
      return [];
    }
    return names
      .filter((f) => f.endsWith(".json") && !f.startsWith("."))
      .map((f) => readJson<TemplateRecord>(join(this.root, "templates", f)))
      .filter((t): t is TemplateRecord => t !== undefined)
      .sort((a, b) => a.name.localeCompare(b.name));
  }
}

/** A `.build-<id>-<pid>-<ms>` directory whose builder is still alive. */
function buildingNow(name: string): boolean {
  const pid = /^\.build-.*-(\d+)-\d+$/.exec(name)?.[1];
  if (!pid) return false;
  try {
    process.kill(Number(pid), 0);
    return true;
  } catch {
    return false;
  }
}

function readJson<T>(file: string): T | undefined {
  try {
    return JSON.parse(readFileSync(file, "utf8")) as T;
  } catch {
    return undefined;
  }
}
