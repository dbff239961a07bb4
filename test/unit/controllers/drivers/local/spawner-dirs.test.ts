// Stale spawner directories: removed only when their owner is gone and nobody listens on their
// socket; a live one (owner running, or a spawner answering) and one named the old way stay.
import { spawnSync } from "node:child_process";
import { chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { makeSpawnerDir, sweepSpawnerDirs } from "../../../../../controllers/drivers/local/spawner-dirs.ts";

const cleanup: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanup.splice(0)) c();
});

/** A pid no process has now: a child's, once it exited. */
function deadPid(): number {
  const r = spawnSync(process.execPath, ["-e", "console.log(process.pid)"], { encoding: "utf8" });
  return Number(r.stdout.trim());
}

function listen(path: string): Promise<Server> {
  return new Promise((resolve) => {
    const server = createServer((s) => s.destroy()).listen(path, () => resolve(server));
  });
}

describe("stale spawner directories", () => {
  it("goes when its owner is gone and its socket refuses; stays while the owner runs, a spawner listens, or the name has no owner", async () => {
    const base = mkdtempSync(join(tmpdir(), "sbx-spawner-dirs-"));
    cleanup.push(() => rmSync(base, { recursive: true, force: true }));
    const dead = deadPid();
    // A killed agent's: its spawner's socket file is left, nobody listens.
    const stale = join(base, `kruise-spawner-${dead}-AbC123`);
    mkdirSync(stale);
    writeFileSync(join(stale, "m1.sock"), "");
    writeFileSync(join(stale, "env-1"), "A=1\0");
    // An owner in another pid namespace (its pid means nothing here) whose spawner runs.
    const answering = join(base, `kruise-spawner-${dead}-DeF456`);
    mkdirSync(answering);
    const server = await listen(join(answering, "m2.sock"));
    cleanup.push(() => server.close());
    // This process's own, and one named before names carried the owner.
    const own = makeSpawnerDir(base);
    const unowned = join(base, "kruise-spawner-Gh7890");
    mkdirSync(unowned);

    const removed = await sweepSpawnerDirs(base);

    expect(removed).toEqual([stale]);
    expect(existsSync(stale)).toBe(false);
    expect(readdirSync(base).sort()).toEqual([answering, own, unowned].map((d) => d.slice(base.length + 1)).sort());
  });

  it("leaves a link or another user's directory named like a stale one, and what it points at (the base is /dev/shm: anyone may write there)", async () => {
    const base = mkdtempSync(join(tmpdir(), "sbx-spawner-dirs-"));
    const victim = mkdtempSync(join(tmpdir(), "sbx-spawner-victim-"));
    cleanup.push(() => rmSync(base, { recursive: true, force: true }), () => rmSync(victim, { recursive: true, force: true }));
    writeFileSync(join(victim, "precious"), "kept");
    const dead = deadPid();
    const link = join(base, `kruise-spawner-${dead}-L1nk00`);
    symlinkSync(victim, link);
    const foreign = join(base, `kruise-spawner-${dead}-F0reign`);
    mkdirSync(foreign);
    writeFileSync(join(foreign, "theirs"), "kept");
    const asRoot = process.getuid?.() === 0;
    if (asRoot) chownSync(foreign, 65534, 65534); // nobody's
    const names = readdirSync(base).sort();

    const removed = await sweepSpawnerDirs(base);

    expect(removed).toEqual(asRoot ? [] : [foreign]);
    expect(readdirSync(victim)).toEqual(["precious"]);
    if (asRoot) expect(readdirSync(base).sort()).toEqual(names);
  });

  it("a base that cannot be read sweeps nothing", async () => {
    expect(await sweepSpawnerDirs(join(tmpdir(), "sbx-no-such-dir-for-spawner-sweep"))).toEqual([]);
  });
});
