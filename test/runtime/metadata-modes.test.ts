// File metadata in listings is read two ways: a runtime serving one sandbox (standalone, a pod's
// sidecar: `single`) reads each entry's user.e2b.* attributes with blocking calls, one serving
// many (embedded in the agent) with the add-on's thread-pool calls, so that a sandbox's file system
// that never answers stalls no other sandbox (metadata-store.ts). Both must list the same.
import { execFileSync } from "node:child_process";
import { mkdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import type { EntryInfo, Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HostView } from "../../controllers/runtime/host-view.ts";
import { createRuntime, type Runtime } from "../../controllers/runtime/runtime.ts";
import { startHarness, type Harness } from "./support/harness.ts";
import { sandboxAt } from "./support/pod-runtime.ts";

const dir = `/home/user/metadata-modes-${process.pid}`;
let many: Harness;
let manySbx: Sandbox;
let single: Runtime;
let singleSbx: Sandbox;
let closeApi: () => void;

/** Set from inside, as a sandbox's own process would (Python's os.setxattr): [path, name, value]. */
function setAttrs(attrs: [string, string, string][]): void {
  execFileSync("python3", ["-c", "import json,os,sys\nfor p,n,v in json.loads(sys.argv[1]): os.setxattr(p, n, v.encode(), follow_symlinks=False)", JSON.stringify(attrs)]);
}
const meta = (path: string, m: Record<string, string>): [string, string, string][] => Object.entries(m).map(([k, v]) => [path, `user.e2b.${k}`, v]);

beforeAll(async () => {
  many = await startHarness();
  manySbx = await many.create();
  single = createRuntime({ single: { view: new HostView(), options: {} } });
  const server = await single.listen({ port: 0, host: "127.0.0.1" });
  ({ sbx: singleSbx, close: closeApi } = await sandboxAt(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, "single"));
  mkdirSync(join(dir, "sub"), { recursive: true });
  for (let i = 0; i < 40; i++) writeFileSync(join(dir, `f${i}`), "x");
  writeFileSync(join(dir, "sub", "inner"), "y");
  // Not followed: a link lists with no metadata of its own, whatever its target carries.
  symlinkSync(join(dir, "f0"), join(dir, "link-to-f0"));
  setAttrs([
    ...Array.from({ length: 14 }, (_, k) => meta(join(dir, `f${k * 3}`), { n: String(k * 3), kind: k % 2 ? "odd" : "even" })).flat(),
    ...meta(join(dir, "sub"), { dir: "yes" }),
    ...meta(join(dir, "sub", "inner"), { depth: "2", "with.dot": "a b" }),
    // Attributes outside user.e2b.* are not metadata.
    [join(dir, "f1"), "user.other", "no"],
  ]);
}, 60_000);

afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  closeApi?.();
  await single?.close();
  await many?.close();
});

const byPath = (entries: EntryInfo[]) => Object.fromEntries(entries.map((e) => [e.path, e.metadata ?? {}]));

describe("metadata in listings, one sandbox per runtime or many", () => {
  it("lists the same metadata, the attributes set on each entry itself", async () => {
    const fromSingle = byPath(await singleSbx.files.list(dir, { depth: 2 }));
    const fromMany = byPath(await manySbx.files.list(dir, { depth: 2 }));
    expect(fromSingle).toEqual(fromMany);
    expect(Object.keys(fromSingle)).toHaveLength(40 + 3);
    expect(fromSingle[join(dir, "f3")]).toEqual({ n: "3", kind: "odd" });
    expect(fromSingle[join(dir, "f0")]).toEqual({ n: "0", kind: "even" });
    expect(fromSingle[join(dir, "f1")]).toEqual({});
    expect(fromSingle[join(dir, "sub")]).toEqual({ dir: "yes" });
    expect(fromSingle[join(dir, "sub", "inner")]).toEqual({ depth: "2", "with.dot": "a b" });
    expect(fromSingle[join(dir, "link-to-f0")]).toEqual({});
  });
});
