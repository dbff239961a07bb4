// The local view's path walk over a mount table plus the sandbox's root (a directory standing in
// for /proc/<holder>/root): paths outside the table are served from that root, and no link, however
// written, leads to a host path outside the sandbox's view.
import { mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { resolveSandboxPath } from "../../../../controllers/drivers/local/path-resolver.ts";
import { PathOutsideSandboxError } from "../../../../controllers/runtime/sandbox-view.ts";

const base = mkdtempSync(join(tmpdir(), "resolver-"));
const root = join(base, "root"); // the sandbox's whole `/` as its holder sees it
const layer = join(base, "layer"); // the writable /home/user
const skeleton = join(base, "skeleton");
for (const d of [join(root, "opt/app"), join(root, "etc"), layer, join(skeleton, "home")]) mkdirSync(d, { recursive: true });
writeFileSync(join(root, "etc/passwd"), "inside\n");
symlinkSync("/etc/passwd", join(root, "opt/abs-link")); // absolute: must stay inside
symlinkSync("../../../../../../etc/passwd", join(root, "opt/dotdot-link"));
symlinkSync("/opt/app", join(layer, "to-opt"));
const mounts = [
  { at: "/", host: skeleton, writable: false },
  { at: "/home/user", host: layer, writable: true },
];
const rootOf = () => root;

describe("resolveSandboxPath with the sandbox's root", () => {
  it("serves paths the table does not cover from the root, /proc/self as pid 1", () => {
    expect(resolveSandboxPath(mounts, "/opt/app", true, rootOf).hostPath).toBe(join(root, "opt/app"));
    expect(resolveSandboxPath(mounts, "/proc/self/status", true, rootOf).sandboxPath).toBe("/proc/1/status");
    expect(resolveSandboxPath(mounts, "/home/user/x", true, rootOf).hostPath).toBe(join(layer, "x"));
  });

  it("resolves absolute and climbing links inside the sandbox, never on the host", () => {
    expect(resolveSandboxPath(mounts, "/opt/abs-link", true, rootOf)).toMatchObject({ sandboxPath: "/etc/passwd", hostPath: join(root, "etc/passwd") });
    expect(resolveSandboxPath(mounts, "/opt/dotdot-link", true, rootOf).hostPath).toBe(join(root, "etc/passwd"));
    expect(resolveSandboxPath(mounts, "/home/user/to-opt", true, rootOf).hostPath).toBe(join(root, "opt/app"));
  });

  it("without a root (no namespaces) refuses what the table does not cover", () => {
    expect(() => resolveSandboxPath(mounts, "/opt/app")).toThrow(PathOutsideSandboxError);
    expect(() => resolveSandboxPath(mounts, "/proc/self/status")).toThrow(PathOutsideSandboxError);
  });
});
