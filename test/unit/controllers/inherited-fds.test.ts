// closeInheritedFds in a process that really inherited descriptors: a child Node process given
// a file at fd 30 and another at fd 31 without close-on-exec (as a supervisor's leak would be),
// which then starts `ls` the way the agent starts everything.
import { spawnSync } from "node:child_process";
import { closeSync, mkdtempSync, openSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";

const dir = mkdtempSync(join(tmpdir(), "inherited-fds-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const MODULE = join(import.meta.dirname, "../../../controllers/lib/inherited-fds.ts");

function child(script: string): string {
  const a = openSync(join(dir, "leaked-a"), "w");
  const b = openSync(join(dir, "leaked-b"), "w");
  try {
    const stdio = ["ignore", "pipe", "pipe", ...Array<"ignore">(27).fill("ignore"), a, b] as const;
    const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { stdio: [...stdio], encoding: "utf8" });
    expect(r.stderr).toBe("");
    return r.stdout;
  } finally {
    closeSync(a);
    closeSync(b);
  }
}

const LIST = `import { execFileSync } from "node:child_process";
const ls = () => execFileSync("ls", ["-l", "/proc/self/fd/"], { encoding: "utf8" });`;

it("a child started without the call holds what its parent inherited (the leak it closes)", () => {
  const out = child(`${LIST} console.log(ls());`);
  expect(out).toContain("leaked-a");
  expect(out).toContain("leaked-b");
});

it("closes every inherited descriptor but those kept, so a child started after holds none", () => {
  const out = child(`${LIST}
const { closeInheritedFds } = await import(${JSON.stringify(MODULE)});
console.log(JSON.stringify(closeInheritedFds([31])));
console.log(ls());`);
  const [closed, ...rest] = out.split("\n");
  // (and any this test's own process inherited: a harness's pipe, say)
  expect(JSON.parse(closed!)).toContain(30);
  expect(JSON.parse(closed!)).not.toContain(31);
  expect(rest.join("\n")).not.toContain("leaked-a");
  expect(rest.join("\n")).toContain("leaked-b");
});
