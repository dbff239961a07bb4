// A template's diskSizeMB bounds what its sandboxes can write, as the E2B SDK sees it: a command
// that fills the disk gets ENOSPC, an upload beyond it is NotEnoughSpaceError (507), another
// sandbox keeps writing, and /proc/self/mountinfo inside names no host data directory path. The
// isolation level `npm start` reports says how disks are bounded.
import { CommandExitError, NotEnoughSpaceError, Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { e2b, uniqueTag } from "./sdk.ts";

const template = `disk${uniqueTag()}`;
let a: Sandbox;
let b: Sandbox;

beforeAll(async () => {
  const { apiUrl, apiKey } = inject("e2b");
  const res = await fetch(new URL(`/admin/teams/admin/templates/${template}`, apiUrl), {
    method: "PUT",
    headers: { "content-type": "application/json", "x-api-key": apiKey },
    body: JSON.stringify({ spec: { replicas: 0, diskSizeMB: 48 } }),
  });
  expect(res.status, await res.text()).toBeLessThan(300);
  [a, b] = await Promise.all([Sandbox.create(template, e2b()), Sandbox.create(template, e2b())]);
});

afterAll(async () => {
  await Promise.all([a?.kill().catch(() => false), b?.kill().catch(() => false)]);
  const { apiUrl, apiKey } = inject("e2b");
  await fetch(new URL(`/admin/teams/admin/templates/${template}`, apiUrl), { method: "DELETE", headers: { "x-api-key": apiKey } });
});

describe("a template's diskSizeMB", () => {
  it("npm start reports how disks are bounded with the isolation level", () => {
    expect(inject("e2b").isolation).toMatch(/^bwrap\+cgroup, disk quota$/);
  });

  it("a sandbox that fills its disk gets ENOSPC and a 507 upload; another sandbox keeps writing", async () => {
    const fill = await a.commands.run("dd if=/dev/zero of=/home/user/fill bs=1M count=96").catch((e: unknown) => e);
    expect(fill).toBeInstanceOf(CommandExitError);
    expect((fill as CommandExitError).stderr).toContain("No space left on device");
    // The last blocks too, so that a small upload meets a full disk at its first write.
    await a.commands.run("dd if=/dev/zero of=/home/user/rest bs=4k").catch(() => undefined);
    const size = Number((await a.commands.run("stat -c %s /home/user/fill")).stdout.trim());
    expect(size).toBeLessThanOrEqual(48 * 1024 * 1024);
    // Small enough to be sent whole before the answer (a runtime that answers an upload early
    // makes the SDK report a transport error instead: issue 11).
    await expect(a.files.write("/tmp/upload.bin", new Uint8Array(16 * 1024).fill(7).buffer)).rejects.toBeInstanceOf(NotEnoughSpaceError);
    await b.files.write("/home/user/ok.bin", new Uint8Array(8 * 1024 * 1024).fill(7).buffer);
    expect((await b.commands.run("stat -c %s /home/user/ok.bin")).stdout.trim()).toBe(String(8 * 1024 * 1024));
  });

  it("mountinfo inside shows no part of the host's data directory", async () => {
    const { dataDir } = inject("e2b");
    for (const sbx of [a, b]) {
      const info = (await sbx.commands.run("cat /proc/self/mountinfo")).stdout;
      // A root filesystem of its own names its upper directory inside the disk; the host view
      // binds /home/user from it.
      expect(info).toMatch(/ \/home\/user | \/ \/ .* - overlay overlay .*upperdir=disk\/upper/);
      for (const part of [dataDir, dataDir.split("/").pop()!, "/sandboxes/", `${sbx.sandboxId}/`]) expect(info, part).not.toContain(part);
    }
  });
});
