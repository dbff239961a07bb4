// What a template-build test leaves in the shared RootfsStore cache (it outlives a run): the
// templates it published, then every step layer it made that no template names (a failed or cut
// build leaves its prefix).
import { readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { RootfsStore } from "../../controllers/drivers/local/rootfs/store.ts";

export async function removeBuiltLayers(store: RootfsStore, templates: string[], since: number): Promise<void> {
  for (const name of templates) rmSync(join(store.root, "templates", `${name}.json`), { force: true });
  const used = new Set(store.templates().flatMap((t) => t.layers));
  for (const id of readdirSync(join(store.root, "layers"))) {
    const info = id.startsWith("step-") ? store.layer(id) : undefined;
    if (info?.kind === "build" && Date.parse(info.createdAt) >= since && !used.has(id)) await store.removeLayer(id);
  }
}
