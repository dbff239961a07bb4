// The data dir's lock (data-dir-lock.ts) without an agent: a second taker is refused with the
// holder's pid, a release lets the next one take it, a holder that dies (SIGKILL: no stop of its
// own runs) leaves it free, and a link planted as the lock file is not followed.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { DataDirInUseError, LOCK_FILE, lockDataDir } from "../../../../controllers/agent/data-dir-lock.ts";

const dirs: string[] = [];
const fresh = () => {
  const d = mkdtempSync(join(tmpdir(), "data-dir-lock-"));
  dirs.push(d);
  return d;
};
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function refusal(dir: string): DataDirInUseError | undefined {
  try {
    lockDataDir(dir).release();
    return undefined;
  } catch (err) {
    if (err instanceof DataDirInUseError) return err;
    throw err;
  }
}

describe("the data dir's lock", () => {
  it("refuses a second taker, naming the holder's pid, until the holder releases it", () => {
    const dir = fresh();
    const lock = lockDataDir(dir);
    expect(readFileSync(join(dir, LOCK_FILE), "utf8")).toBe(`${process.pid}\n`);
    const err = refusal(dir);
    expect(err?.pid).toBe(process.pid);
    expect(err?.message).toBe(`data dir ${dir} is in use by another agent (pid ${process.pid}): stop it, or give this one another --data-dir`);
    lock.release();
    lock.release();
    expect(refusal(dir)).toBeUndefined();
  });

  it("is free once its holder is killed, and the next holder's pid replaces the old one", async () => {
    const dir = fresh();
    // A longer pid left in the file must not survive as a tail of the next holder's.
    writeFileSync(join(dir, LOCK_FILE), "9999999999\n");
    // Another process that takes it as an agent does, then is killed as a crash would end it.
    const code = `import(${JSON.stringify(join(process.cwd(), "controllers/agent/data-dir-lock.ts"))}).then((m) => { m.lockDataDir(${JSON.stringify(dir)}); console.log("locked"); setInterval(() => {}, 60_000); })`;
    const holder = spawn(process.execPath, ["--input-type=module", "-e", code], { stdio: ["ignore", "pipe", "inherit"] });
    const exited = new Promise((r) => holder.once("exit", r));
    await new Promise((r) => holder.stdout.once("data", r));
    expect(refusal(dir)?.pid).toBe(holder.pid);
    holder.kill("SIGKILL");
    await exited;
    const lock = lockDataDir(dir);
    expect(readFileSync(join(dir, LOCK_FILE), "utf8")).toBe(`${process.pid}\n`);
    lock.release();
  });

  it("does not follow a link planted as the lock file", () => {
    const dir = fresh();
    const target = join(fresh(), "elsewhere");
    writeFileSync(target, "untouched\n");
    symlinkSync(target, join(dir, LOCK_FILE));
    expect(() => lockDataDir(dir)).toThrow(/ELOOP/);
    expect(readFileSync(target, "utf8")).toBe("untouched\n");
  });
});
