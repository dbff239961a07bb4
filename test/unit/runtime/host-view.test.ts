import { mkdirSync, mkdtempSync, realpathSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { HostView, UserSwitchError } from "../../../controllers/runtime/host-view.ts";

const dir = mkdtempSync(join(tmpdir(), "hostview-"));
writeFileSync(join(dir, "passwd"), "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1001::/home/user:/bin/bash\n");
writeFileSync(join(dir, "group"), "root:x:0:\nusers:x:1001:\n");
const opts = { passwdPath: join(dir, "passwd"), groupPath: join(dir, "group") };
const req = (name: string) => ({ cmd: "/bin/true", args: [], cwd: "/", env: {}, user: new HostView(opts).lookupUser(name)! });

afterEach(() => vi.restoreAllMocks());

describe("HostView", () => {
  it("reads the user database, including names for ids", () => {
    const v = new HostView(opts);
    expect(v.lookupUser("user")).toMatchObject({ uid: 1000, gid: 1001, home: "/home/user" });
    expect([v.userName(1000), v.groupName(1001), v.userName(4242)]).toEqual(["user", "users", undefined]);
  });

  it("switches user via uid/gid when root", () => {
    vi.spyOn(process, "getuid").mockReturnValue(0);
    expect(new HostView(opts).command(req("user"))).toMatchObject({ file: "/bin/true", uid: 1000, gid: 1001 });
  });

  it("refuses another user when it is not root, instead of running as itself", () => {
    vi.spyOn(process, "getuid").mockReturnValue(1000);
    const v = new HostView(opts);
    expect(v.command(req("user")).uid).toBeUndefined();
    expect(() => v.command(req("root"))).toThrow(UserSwitchError);
  });

  it("resolves links down to the deepest part that exists, the rest as written (a write's missing directories)", () => {
    const real = realpathSync(dir);
    mkdirSync(join(dir, "target"), { recursive: true });
    symlinkSync(join(dir, "target"), join(dir, "via"));
    const v = new HostView(opts);
    expect(v.toHost(join(dir, "via/new/x"))).toBe(join(real, "target/new/x"));
    expect(v.toHost(join(dir, "via"), { followFinal: false })).toBe(join(real, "via"));
    expect(v.toHost("/")).toBe("/");
  });
});
