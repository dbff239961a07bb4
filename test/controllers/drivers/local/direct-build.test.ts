// A template build without an edge (builder/direct-build.ts), as `.ci/run` and `npm start` build
// the code-interpreter template: steps from `base` run in build sandboxes with a step network
// (here it reaches only the package mirror stand-in in a namespace of this machine), land as
// layers, and the same build again is served from the cache. Needs root (the global setup built
// `base`).
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runDirectBuild, type DirectBuild } from "../../../../controllers/drivers/local/builder/direct-build.ts";
import { RootfsStore } from "../../../../controllers/drivers/local/rootfs/store.ts";
import { TemplateStep } from "../../../../schema/api/template-build.ts";
import type { BuildLog } from "../../../../schema/protocol/build.ts";
import { removeBuiltLayers } from "../../../support/built-layers.ts";
import { startPackageMirror, type PackageMirror } from "../../../support/package-mirror.ts";

const store = new RootfsStore();
const since = Date.now();
const tag = randomUUID().slice(0, 8);
const outputs: string[] = [];
let mirror: PackageMirror;

beforeAll(async () => {
  mirror = await startPackageMirror();
  mirror.addDeb({ name: `direct-${tag}`, version: "1.0", script: "echo direct" });
});

afterAll(() => {
  mirror?.stop();
  removeBuiltLayers(store, outputs, since);
});

const run = (command: string, user = "") => TemplateStep.parse({ type: "RUN", args: [command, user] });

/** A file of the built template, read from its top-most layer that has it. */
function builtFile(template: string, path: string): string | undefined {
  for (const id of [...(store.template(template)?.layers ?? [])].reverse()) {
    try {
      return readFileSync(join(store.layerTree(id), path), "utf8");
    } catch {
      // not in this layer
    }
  }
  return undefined;
}

async function build(b: DirectBuild): Promise<{ result: Awaited<ReturnType<typeof runDirectBuild>>; logs: BuildLog[] }> {
  const logs: BuildLog[] = [];
  outputs.push(b.output);
  const result = await runDirectBuild(b, (l) => logs.push(l), store);
  return { result, logs };
}

describe("a template build without an edge", () => {
  it("runs steps from base with a network and /tmp for every user; the same build again is all cached", async () => {
    const b: DirectBuild = {
      from: "base",
      owner: `test-${tag}`,
      output: `direct-${tag}`,
      steps: [
        // Only the mirror: base's own sources (a public archive) are moved out of apt's way.
        run(`rm -f /etc/apt/sources.list; rm -rf /etc/apt/sources.list.d/*; echo "${mirror.aptSource}" > /etc/apt/sources.list.d/mirror.list && apt-get update -q && apt-get install -y -q direct-${tag}`, "root"),
        run("t=$(mktemp /tmp/step.XXXXXX) && echo \"$(id -un) wrote /tmp\" > /home/user/tmp-check && direct-" + tag + " >> /home/user/tmp-check"),
      ],
    };
    const first = await build(b);
    expect(first.result.status, first.logs.map((l) => l.message).join("\n")).toBe("ready");
    expect(first.logs.map((l) => l.message).join("\n")).toContain(`Setting up direct-${tag} (1.0)`);
    expect(builtFile(b.output, "home/user/tmp-check")).toBe("user wrote /tmp\ndirect\n");

    const again = await build(b);
    expect(again.result.status).toBe("ready");
    expect(again.logs.filter((l) => l.message.startsWith("CACHED ")).length).toBe(2);
    expect(again.result.layers).toEqual(first.result.layers);
  }, 180_000);

  it("a failing step ends the build with its reason, its output logged", async () => {
    const { result, logs } = await build({ from: "base", owner: `test-${tag}`, output: `direct-fail-${tag}`, steps: [run("echo direct-before-failure; exit 9")] });
    expect(result).toMatchObject({ status: "error", message: "step 1 (RUN) failed: exit code 9" });
    expect(logs.map((l) => l.message)).toContain("direct-before-failure");
    expect(store.template(`direct-fail-${tag}`)).toBeUndefined();
  }, 60_000);
});
