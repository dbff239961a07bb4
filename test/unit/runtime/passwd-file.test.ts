// The agent reads a sandbox's /etc/passwd and /etc/group on its main thread (user names of
// commands and file listings). A FIFO there, made by root in any sandbox, blocked the read, and the
// whole agent with it, for good; a device or huge file was read whole.
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, expect, it } from "vitest";
import { cachedFile, parsePasswd } from "../../../controllers/runtime/passwd.ts";

const dir = mkdtempSync(join(tmpdir(), "passwd-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

it("a FIFO at /etc/passwd reads as no users, at once", () => {
  const fifo = join(dir, "fifo");
  execFileSync("mkfifo", [fifo]);
  // In a process of its own: a read that blocks cannot be interrupted from this thread.
  const module = JSON.stringify(fileURLToPath(new URL("../../../controllers/runtime/passwd.ts", import.meta.url)));
  const script = `const m = await import(${module}); console.log(JSON.stringify(m.cachedFile(() => ${JSON.stringify(fifo)}, m.parsePasswd, [])()));`;
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8", timeout: 10_000 });
  expect({ signal: r.signal, stdout: r.stdout, stderr: r.stderr.slice(0, 300) }).toEqual({ signal: null, stdout: "[]\n", stderr: "" });
});

it("a device or a file past 4 MiB reads as no users; a plain file, or a link to one, as its users", () => {
  expect(cachedFile(() => "/dev/zero", parsePasswd, [])()).toEqual([]);
  const big = join(dir, "big");
  writeFileSync(big, `${"x".repeat(5 << 20)}\nroot:x:0:0:root:/root:/bin/bash\n`);
  expect(cachedFile(() => big, parsePasswd, [])()).toEqual([]);
  const plain = join(dir, "passwd");
  writeFileSync(plain, "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n");
  expect(cachedFile(() => plain, parsePasswd, [])().map((e) => e.name)).toEqual(["root", "user"]);
  const link = join(dir, "link");
  symlinkSync(plain, link);
  expect(cachedFile(() => link, parsePasswd, [])().map((e) => e.name)).toEqual(["root", "user"]);
});

it("sandboxes with the same file share one parse that none can change; different files keep their own users", () => {
  const a = join(dir, "same-a");
  const b = join(dir, "same-b");
  const other = join(dir, "other");
  const text = "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n";
  writeFileSync(a, text);
  writeFileSync(b, text);
  writeFileSync(other, "root:x:0:0:root:/root:/bin/sh\nagent:x:1001:1001::/home/agent:/bin/sh\n");
  const [ca, cb, co] = [cachedFile(() => a, parsePasswd, []), cachedFile(() => b, parsePasswd, []), cachedFile(() => other, parsePasswd, [])];
  // Alternating texts: a memo keyed by the parser alone would hand one file's users to the other.
  expect(ca().map((e) => e.name)).toEqual(["root", "user"]);
  expect(co().map((e) => e.name)).toEqual(["root", "agent"]);
  expect(cb().map((e) => e.name)).toEqual(["root", "user"]);
  // One sandbox's caller writing to an entry must not reach the other sandbox's look-up.
  expect(() => {
    (ca()[1] as { home: string }).home = "/tmp/elsewhere";
  }).toThrow(TypeError);
  expect(cb()[1]!.home).toBe("/home/user");
});

it("a file past 64 KiB is parsed for its sandbox alone: not shared, so not kept after it", () => {
  const lines = Array.from({ length: 3000 }, (_, i) => `u${i}:x:${2000 + i}:${2000 + i}::/home/u${i}:/bin/sh`).join("\n");
  expect(lines.length).toBeGreaterThan(64 << 10);
  const [a, b] = [join(dir, "large-a"), join(dir, "large-b")];
  writeFileSync(a, lines);
  writeFileSync(b, lines);
  const [ua, ub] = [cachedFile(() => a, parsePasswd, [])(), cachedFile(() => b, parsePasswd, [])()];
  expect(ua).toHaveLength(3000);
  expect(ua === ub || Object.isFrozen(ua)).toBe(false);
});
